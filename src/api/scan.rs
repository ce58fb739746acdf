//! A batch body (`{"timers": [ … ]}`) split into its items a piece at a time, so that a
//! 16 MiB body is never parsed in one synchronous pass on the shard that read it: the caller
//! scans for a slice of time, yields to the executor (the shard's wheel runs), and goes on.
//!
//! Only the well-formed shape is scanned here: `{`, the key `"timers"` written plainly, `:`,
//! `[`, items separated by commas, `]`, `}`, with any whitespace. Anything else (another key,
//! an escaped key, malformed JSON) gives up, and the caller parses the body whole with
//! [`super::body::parse_batch`], whose answer (the error the API documents) is the one that
//! counts. So the split never changes what a body means, only when its work runs. Too many
//! items are counted here, in slices, as the whole-body parse counts them.
//!
//! Cost: one serde_json pass over each item (as the whole-body parse makes), a few bytes of
//! punctuation between them. An item is scanned whole, and at most [`MAX_ITEM_BYTES`] of it:
//! an item that does not end within them is refused (`Step::TooLarge`) without parsing more,
//! since no valid item is that long (a 16 MiB item was 45 ms of one step, and as much again
//! for each later parse of it).

use super::body::{MAX_BATCH_ITEMS, MAX_ITEM_BYTES};
use serde_json::value::RawValue;

/// Where a scan stands.
pub enum Step<'a> {
    /// Every item, in order.
    Done(Vec<&'a RawValue>),
    /// The slice of time is up; call again.
    More,
    /// Not the plain shape: parse the body whole instead.
    GiveUp,
    /// More than [`MAX_BATCH_ITEMS`] items, this many, each scanned as one would be (and
    /// not kept past the bound), so the count comes in slices too.
    TooMany(usize),
    /// The item at this index does not end within [`MAX_ITEM_BYTES`]: no valid item is that
    /// long, and parsing it (or the whole body) would be one step of tens of milliseconds.
    TooLarge(usize),
}

pub struct BatchScan<'a> {
    body: &'a [u8],
    pos: usize,
    items: Vec<&'a RawValue>,
    /// Items scanned past the first [`MAX_BATCH_ITEMS`].
    beyond: usize,
    started: bool,
}

impl<'a> BatchScan<'a> {
    pub fn new(body: &'a [u8]) -> Self {
        BatchScan {
            body,
            pos: 0,
            items: Vec::new(),
            beyond: 0,
            started: false,
        }
    }

    /// Scans items until they end, or `over` says the slice is used up (asked after each item).
    pub fn step(&mut self, over: impl Fn() -> bool) -> Step<'a> {
        if !self.started {
            self.started = true;
            let opened = self.punct(b'{')
                && self.literal(b"\"timers\"")
                && self.punct(b':')
                && self.punct(b'[');
            if !opened {
                return Step::GiveUp;
            }
            if self.peek() == Some(b']') {
                // An empty batch: the whole-body parse gives its error.
                return Step::GiveUp;
            }
        }
        loop {
            let item = match self.item() {
                Ok(item) => item,
                Err(Unscanned::TooLarge) => return Step::TooLarge(self.items.len()),
                Err(Unscanned::NotPlain) => return Step::GiveUp,
            };
            if self.items.len() < MAX_BATCH_ITEMS {
                self.items.push(item);
            } else {
                self.beyond += 1;
            }
            if self.punct(b',') {
                if over() {
                    return Step::More;
                }
                continue;
            }
            if self.punct(b']') && self.punct(b'}') && self.at_end() {
                if self.beyond > 0 {
                    return Step::TooMany(MAX_BATCH_ITEMS + self.beyond);
                }
                return Step::Done(std::mem::take(&mut self.items));
            }
            return Step::GiveUp;
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.body.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.body.get(self.pos).copied()
    }

    /// Skips whitespace and `c`; false if the next byte is not `c`.
    fn punct(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn literal(&mut self, s: &[u8]) -> bool {
        self.skip_ws();
        if self.body[self.pos..].starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.pos == self.body.len()
    }

    /// The next item's JSON text (an object, as the items must be; anything else gives up).
    /// At most [`MAX_ITEM_BYTES`] are read for it, so one item costs at most that much
    /// parsing, whatever the body holds.
    fn item(&mut self) -> Result<&'a RawValue, Unscanned> {
        if self.peek() != Some(b'{') {
            return Err(Unscanned::NotPlain);
        }
        let rest: &'a [u8] = &self.body[self.pos..];
        let window = &rest[..rest.len().min(MAX_ITEM_BYTES)];
        let mut values = serde_json::Deserializer::from_slice(window).into_iter::<&'a RawValue>();
        match values.next() {
            Some(Ok(item)) => {
                self.pos += values.byte_offset();
                Ok(item)
            }
            Some(Err(e)) if e.is_eof() && rest.len() > window.len() => Err(Unscanned::TooLarge),
            _ => Err(Unscanned::NotPlain),
        }
    }
}

/// Why an item was not scanned.
enum Unscanned {
    NotPlain,
    TooLarge,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(body: &[u8]) -> Option<Vec<String>> {
        let mut s = BatchScan::new(body);
        loop {
            // A deadline already past: one item per step, the most steps.
            match s.step(|| true) {
                Step::Done(items) => {
                    return Some(items.iter().map(|i| i.get().to_string()).collect())
                }
                Step::More => continue,
                Step::GiveUp | Step::TooLarge(_) | Step::TooMany(_) => return None,
            }
        }
    }

    /// The step the scan ends with.
    fn last_step(body: &[u8]) -> Step<'_> {
        let mut s = BatchScan::new(body);
        loop {
            match s.step(|| false) {
                Step::More => continue,
                end => return end,
            }
        }
    }

    fn batch(items: &[String]) -> Vec<u8> {
        format!(r#"{{"timers":[{}]}}"#, items.join(",")).into_bytes()
    }

    fn item(key: &str, payload_bytes: usize) -> String {
        format!(
            r#"{{"key":"{key}","delay_ms":1,"payload":"{}"}}"#,
            "x".repeat(payload_bytes)
        )
    }

    /// An item that does not end within `MAX_ITEM_BYTES` is refused by its index, however
    /// long the rest of the body; one that ends within it is scanned, and a malformed one
    /// within it still goes to the whole-body parse for its documented error.
    #[test]
    fn an_item_longer_than_the_bound_is_refused_by_its_index_without_reading_it_all() {
        let huge = item("h", 8 << 20);
        let body = batch(&[item("a", 10), item("b", 10), huge.clone(), item("c", 10)]);
        assert!(matches!(last_step(&body), Step::TooLarge(2)));
        assert!(matches!(last_step(&batch(&[huge])), Step::TooLarge(0)));
        let fits = item("f", MAX_ITEM_BYTES - 64);
        assert!(fits.len() <= MAX_ITEM_BYTES);
        match last_step(&batch(&[item("a", 1), fits.clone()])) {
            Step::Done(items) => assert_eq!(items[1].get(), fits),
            _ => panic!("an item within the bound is scanned"),
        }
        let broken = format!(r#"{{"timers":[{{"key":"a",}}, {}]}}"#, item("b", 1));
        assert!(matches!(last_step(broken.as_bytes()), Step::GiveUp));
        // Cut short inside the bound: malformed, not too large.
        let cut = r#"{"timers":[{"key":"a","payload":"xx"#;
        assert!(matches!(last_step(cut.as_bytes()), Step::GiveUp));
    }

    #[test]
    fn a_plain_batch_is_split_into_its_items_across_steps() {
        let body = br#" { "timers" : [ {"key":"a","delay_ms":1} ,{"key":"b","payload":{"x":[1,2]}}
        ] } "#;
        let items = scan_all(body).expect("the plain shape");
        assert_eq!(
            items,
            [
                r#"{"key":"a","delay_ms":1}"#,
                r#"{"key":"b","payload":{"x":[1,2]}}"#
            ]
        );
    }

    #[test]
    fn anything_but_the_plain_shape_is_left_to_the_whole_body_parse() {
        for body in [
            &br#"{"timers":[]}"#[..],
            br#"{"timers":[{"key":"a"}],"x":1}"#,
            br#"{"x":1,"timers":[{"key":"a"}]}"#,
            br#"{"\u0074imers":[{"key":"a"}]}"#,
            br#"{"timers":[1,{"key":"a"}]}"#,
            br#"{"timers":[{"key":"a"},]}"#,
            br#"{"timers":[{"key":"a"}"#,
            br#"{"timers":[{"key":"a"}]} x"#,
            br#"[{"key":"a"}]"#,
            b"",
        ] {
            assert!(
                scan_all(body).is_none(),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// Past `MAX_BATCH_ITEMS`, the items are counted a step at a time, to the count the
    /// whole-body parse gives; at the bound exactly, the batch is scanned.
    #[test]
    fn too_many_items_are_counted_in_steps_as_the_whole_body_parse_counts_them() {
        use crate::api::error::ApiError;
        for n in [MAX_BATCH_ITEMS + 1, MAX_BATCH_ITEMS + 2_345] {
            let body = batch(
                &(0..n)
                    .map(|i| item(&format!("k{i}"), 1))
                    .collect::<Vec<_>>(),
            );
            let mut s = BatchScan::new(&body);
            let mut steps = 0;
            let count = loop {
                steps += 1;
                match s.step(|| true) {
                    Step::More => continue,
                    Step::TooMany(count) => break count,
                    _ => panic!("{n} items: not counted"),
                }
            };
            assert_eq!(count, n);
            assert!(steps >= n, "one item a step when every slice is over");
            match crate::api::body::parse_batch(&body) {
                Err(ApiError::TooManyItems { count, .. }) => assert_eq!(count, n),
                _ => panic!("the whole-body parse refuses {n} items"),
            }
        }
        let at = batch(
            &(0..MAX_BATCH_ITEMS)
                .map(|i| item(&format!("k{i}"), 1))
                .collect::<Vec<_>>(),
        );
        assert!(matches!(last_step(&at), Step::Done(items) if items.len() == MAX_BATCH_ITEMS));
    }
}
