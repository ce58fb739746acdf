//! A batch body (`{"timers": [ … ]}`) split into its items a piece at a time, so that a
//! 16 MiB body is never parsed in one synchronous pass on the shard that read it: the caller
//! scans for a slice of time, yields to the executor (the shard's wheel runs), and goes on.
//!
//! The scan answers as the whole-body parse does ([`super::body::parse_batch`]), for every
//! body, valid or not: the items, or the same error (kind, message and position). It walks
//! the body's structure itself and hands serde one value at a time (an item, or an element of
//! a body that is an array), at most [`MAX_ITEM_BYTES`] of it. Where a body stops being a
//! batch, serde parses only what follows: a short text that stands for everything already
//! scanned (`{"timers":[""`, as well formed as what it replaces), then the body from where the
//! scan stopped, and the error's position is moved back to the body's own. So no body,
//! however it is written (an escaped `"timers"`, a field after the array, a trailing comma,
//! an array of numbers), costs more than one value's parse in a step.
//!
//! What no valid body holds is refused by its bound, without reading it all: an item that
//! does not end within `MAX_ITEM_BYTES` (`413`: a 16 MiB item was 45 ms of one step, and as
//! much again for each later parse of it), and a field name or value beside the array longer
//! than that (`400 invalid_field`; serde would copy the name into its message). A body that
//! is not an object is refused as one without reading past a first value that long.
//!
//! Cost: one serde pass over each item (as the whole-body parse makes), a count of its
//! newlines, and a few bytes of punctuation between items.

use super::body::{
    batch_syntax, item_too_large, json_error_at, not_an_object, parse_batch, MAX_BATCH_ITEMS,
    MAX_ITEM_BYTES,
};
use super::error::ApiError;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Where a scan stands.
pub enum Step<'a> {
    /// Every item, in order.
    Done(Vec<&'a RawValue>),
    /// The slice of time is up; call again.
    More,
    /// Not a batch the service takes: the error the whole-body parse gives, or a refusal by
    /// a bound (see the module doc).
    Refused(ApiError),
}

/// What the body turned out to be.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// An object: a batch, if well formed.
    Batch,
    /// An array: refused once it is known to be JSON, as serde would read a struct from it.
    Array,
}

/// What the scan expects next.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum At {
    /// The body's value.
    Start,
    /// After `{`: the key `timers`.
    Key,
    /// After the key: `:`.
    Colon,
    /// After `:`: `[`.
    Open,
    /// After `[`: the first item, or `]`.
    First,
    /// After an item: `,` or `]`.
    AfterItem,
    /// After `,`: an item.
    Item,
    /// After `]`: `}` (a batch) or the body's end (an array).
    Close,
    /// After the body's value: nothing but whitespace.
    End,
}

/// The text that stands, for serde, for a well-formed body scanned up to `at`.
fn head(shape: Shape, at: At) -> &'static [u8] {
    match (shape, at) {
        (_, At::Start) => b"",
        (Shape::Batch, At::Key) => b"{",
        (Shape::Batch, At::Colon) => br#"{"timers""#,
        (Shape::Batch, At::Open) => br#"{"timers":"#,
        (Shape::Batch, At::First) => br#"{"timers":["#,
        (Shape::Batch, At::AfterItem) => br##"{"timers":["""##,
        (Shape::Batch, At::Item) => br#"{"timers":["","#,
        (Shape::Batch, At::Close) => br#"{"timers":[""]"#,
        (Shape::Batch, At::End) => br#"{"timers":[""]}"#,
        (Shape::Array, At::Key | At::Colon | At::Open | At::First) => b"[",
        (Shape::Array, At::AfterItem) => br##"["""##,
        (Shape::Array, At::Item) => br#"["","#,
        (Shape::Array, At::Close | At::End) => br#"[""]"#,
    }
}

/// `over` is asked after this many items, an item of `ASK_BYTES` or more counting as one
/// more for each: tiny items (a body of millions of numbers) are not each worth a clock read,
/// and a large one (up to `MAX_ITEM_BYTES`) is asked after at once.
const ASK_EVERY: usize = 16;
const ASK_BYTES: usize = 4096;

/// The longest key read as a string to compare with `timers`: each of its six characters
/// escaped as `\uXXXX`, and the quotes.
const KEY_BYTES: usize = 2 + 6 * 6;

pub struct BatchScan<'a> {
    body: &'a [u8],
    pos: usize,
    at: At,
    shape: Shape,
    items: Vec<&'a RawValue>,
    /// Items scanned past the first [`MAX_BATCH_ITEMS`] (or every element of an array).
    beyond: usize,
    /// The line (from 1) of `counted`, and where that line starts: the newlines before
    /// `counted` are counted as the scan goes, a slice at a time (at each `Step::More`), so
    /// that a refusal counts at most one slice's bytes. (Counted an item at a time, they were
    /// a loop of its own per registration.)
    line: usize,
    line_start: usize,
    counted: usize,
    /// Items (weighed by their bytes) since `over` was last asked, and where the last item
    /// ended.
    unasked: usize,
    asked_at: usize,
}

impl<'a> BatchScan<'a> {
    pub fn new(body: &'a [u8]) -> Self {
        BatchScan {
            body,
            pos: 0,
            at: At::Start,
            shape: Shape::Batch,
            items: Vec::new(),
            beyond: 0,
            line: 1,
            line_start: 0,
            counted: 0,
            unasked: 0,
            asked_at: 0,
        }
    }

    /// Scans until the body's answer is known, or `over` says the slice is used up (asked
    /// after every 16 items, or sooner after large ones: `ASK_EVERY`).
    pub fn step(&mut self, over: impl Fn() -> bool) -> Step<'a> {
        loop {
            let at = self.at;
            match at {
                At::Start => match self.peek() {
                    Some(b'{') => self.pass(At::Key),
                    Some(b'[') => {
                        self.shape = Shape::Array;
                        self.pass(At::First);
                    }
                    _ => return self.refuse(),
                },
                At::Key if self.key() => self.at = At::Colon,
                At::Colon if self.punct(b':') => self.at = At::Open,
                At::Open if self.punct(b'[') => self.at = At::First,
                At::First if self.peek() == Some(b']') => self.pass(At::Close),
                At::First | At::Item => {
                    match self.item() {
                        Ok(item)
                            if self.shape == Shape::Batch && self.items.len() < MAX_BATCH_ITEMS =>
                        {
                            self.items.push(item)
                        }
                        Ok(_) => self.beyond += 1,
                        Err(Unscanned::TooLarge) => return Step::Refused(self.too_large()),
                        Err(Unscanned::NotValue) => return self.refuse(),
                    }
                    self.at = At::AfterItem;
                    self.unasked += 1 + (self.pos - self.asked_at) / ASK_BYTES;
                    self.asked_at = self.pos;
                    if self.unasked >= ASK_EVERY {
                        self.unasked = 0;
                        if over() {
                            self.count_lines();
                            return Step::More;
                        }
                    }
                }
                At::AfterItem if self.punct(b',') => self.at = At::Item,
                At::AfterItem if self.punct(b']') => self.at = At::Close,
                At::Close if self.shape == Shape::Array => self.at = At::End,
                At::Close if self.punct(b'}') => self.at = At::End,
                At::End if self.peek().is_none() => return self.finish(),
                _ => return self.refuse(),
            }
        }
    }

    /// The answer for a body that ended well formed.
    fn finish(&mut self) -> Step<'a> {
        match self.shape {
            Shape::Array => Step::Refused(not_an_object("the body")),
            Shape::Batch if self.beyond > 0 => Step::Refused(ApiError::TooManyItems {
                count: MAX_BATCH_ITEMS + self.beyond,
                limit: MAX_BATCH_ITEMS,
            }),
            Shape::Batch if self.items.is_empty() => Step::Refused(ApiError::EmptyBatch),
            Shape::Batch => Step::Done(std::mem::take(&mut self.items)),
        }
    }

    /// The error for a body that stops being a batch where the scan stands: serde's, on the
    /// text that stands for what was scanned and the body from here on (at most
    /// `MAX_ITEM_BYTES` of it: past the array nothing valid is longer, and within it the
    /// scan has already found the item it stopped on to end or to break within them).
    fn refuse(&mut self) -> Step<'a> {
        self.skip_ws();
        self.count_lines();
        let head = head(self.shape, self.at);
        let from = self.pos;
        let to = self.body.len().min(from.saturating_add(MAX_ITEM_BYTES));
        let mut text = Vec::with_capacity(head.len() + (to - from));
        text.extend_from_slice(head);
        text.extend_from_slice(&self.body[from..to]);
        let batch = self.shape == Shape::Batch && self.at != At::Start;
        let verdict = if batch {
            batch_syntax(&text)
        } else {
            serde_json::from_slice::<IgnoredAny>(&text).map(drop)
        };
        let e = match verdict {
            Err(e) => e,
            // Well formed and not an object (what serde reads of a first value so long).
            Ok(()) if !batch => return Step::Refused(not_an_object("the body")),
            // The scan stopped where serde goes on: the whole body decides.
            Ok(()) => {
                return match parse_batch(self.body) {
                    Ok(items) => Step::Done(items),
                    Err(e) => Step::Refused(e),
                }
            }
        };
        if e.is_eof() && to < self.body.len() {
            return Step::Refused(if batch {
                ApiError::InvalidField(format!(
                    "a batch body holds one field, `timers`, an array of items; a field name or \
                     value of more than {MAX_ITEM_BYTES} bytes is not read"
                ))
            } else {
                not_an_object("the body")
            });
        }
        let message = self.message_at(&e, head.len(), from);
        Step::Refused(json_error_at(&e, message))
    }

    /// serde's message for `e` on the text of `head` bytes then the body from `from`, with
    /// the position moved back to the body's own (serde counts lines from 1, and columns as
    /// the bytes before the error on its line).
    fn message_at(&self, e: &serde_json::Error, head: usize, from: usize) -> String {
        let full = e.to_string();
        if e.line() == 0 {
            return full;
        }
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let Some(what) = full.strip_suffix(&suffix) else {
            return full;
        };
        let (line, column) = if e.line() == 1 {
            // The head has no newline: the error is on the line the scan stopped on.
            let column = (e.column() + from).saturating_sub(head + self.line_start);
            (self.line, column)
        } else {
            (self.line + e.line() - 1, e.column())
        };
        format!("{what} at line {line} column {column}")
    }

    /// The refusal of the item (or array element) that does not end within `MAX_ITEM_BYTES`.
    fn too_large(&self) -> ApiError {
        match self.shape {
            Shape::Batch => {
                item_too_large(&format!("batch item {}", self.items.len() + self.beyond))
            }
            Shape::Array => not_an_object("the body"),
        }
    }

    /// Counts the newlines between the last count and `pos`.
    fn count_lines(&mut self) {
        let seen = &self.body[self.counted..self.pos];
        let newlines = seen.iter().filter(|&&b| b == b'\n').count();
        if newlines > 0 {
            self.line += newlines;
            if let Some(i) = seen.iter().rposition(|&b| b == b'\n') {
                self.line_start = self.counted + i + 1;
            }
        }
        self.counted = self.pos;
    }

    /// Steps over the byte `peek` just saw, and on to `at`.
    fn pass(&mut self, at: At) {
        self.pos += 1;
        self.at = at;
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

    /// The key `timers`, written plainly or with escapes; false for any other.
    fn key(&mut self) -> bool {
        if self.peek() != Some(b'"') {
            return false;
        }
        let rest: &'a [u8] = &self.body[self.pos..];
        if rest.starts_with(br#""timers""#) {
            self.pos += 8;
            return true;
        }
        let window = &rest[..rest.len().min(KEY_BYTES)];
        let mut keys = serde_json::Deserializer::from_slice(window).into_iter::<Cow<'_, str>>();
        match keys.next() {
            Some(Ok(key)) if key == "timers" => {
                self.pos += keys.byte_offset();
                true
            }
            _ => false,
        }
    }

    /// The next item's JSON text (any value: the whole-body parse takes any, and each item is
    /// checked on its own later). At most [`MAX_ITEM_BYTES`] are read for it, so one item
    /// costs at most that much parsing, whatever the body holds.
    fn item(&mut self) -> Result<&'a RawValue, Unscanned> {
        if self.peek().is_none() {
            return Err(Unscanned::NotValue);
        }
        let rest: &'a [u8] = &self.body[self.pos..];
        // One byte past the bound, to tell an item of exactly the bound (or a number cut by
        // the window, which serde would read as ended) from a longer one.
        let window = &rest[..rest.len().min(MAX_ITEM_BYTES + 1)];
        let mut values = serde_json::Deserializer::from_slice(window).into_iter::<&'a RawValue>();
        match values.next() {
            Some(Ok(_)) if values.byte_offset() > MAX_ITEM_BYTES => Err(Unscanned::TooLarge),
            Some(Ok(item)) => {
                self.pos += values.byte_offset();
                Ok(item)
            }
            Some(Err(e)) if e.is_eof() && rest.len() > window.len() => Err(Unscanned::TooLarge),
            _ => Err(Unscanned::NotValue),
        }
    }
}

/// Why an item was not scanned.
enum Unscanned {
    /// Not a JSON value: the whole-body parse's error is found by `refuse`.
    NotValue,
    TooLarge,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The scan's answer, one item a step (every slice already over: the most steps).
    fn answer(body: &[u8]) -> Result<Vec<String>, ApiError> {
        let mut s = BatchScan::new(body);
        loop {
            match s.step(|| true) {
                Step::Done(items) => {
                    return Ok(items.iter().map(|i| i.get().to_string()).collect())
                }
                Step::More => continue,
                Step::Refused(e) => return Err(e),
            }
        }
    }

    /// The whole-body parse's answer.
    fn whole(body: &[u8]) -> Result<Vec<String>, ApiError> {
        parse_batch(body).map(|items| items.iter().map(|i| i.get().to_string()).collect())
    }

    /// The step the scan ends with, in as few steps as it takes.
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
    /// long the rest of the body; one that ends within it, or exactly at it, is scanned, and
    /// a malformed one within it gets the whole-body parse's error.
    #[test]
    fn an_item_longer_than_the_bound_is_refused_by_its_index_without_reading_it_all() {
        let refused_as = |body: &[u8]| match last_step(body) {
            Step::Refused(ApiError::PayloadTooLarge(m)) => m,
            _ => panic!("refused as too large"),
        };
        let huge = item("h", 8 << 20);
        let body = batch(&[item("a", 10), item("b", 10), huge.clone(), item("c", 10)]);
        assert!(refused_as(&body).starts_with("batch item 2 "));
        assert!(refused_as(&batch(&[huge])).starts_with("batch item 0 "));
        // A number longer than the bound is refused too, not read as cut at the window.
        let digits = format!(r#"{{"timers":[{}]}}"#, "1".repeat(MAX_ITEM_BYTES + 10));
        assert!(refused_as(digits.as_bytes()).starts_with("batch item 0 "));
        let overhead = item("f", 0).len();
        for fits in [
            item("f", MAX_ITEM_BYTES - 64),
            item("f", MAX_ITEM_BYTES - overhead),
        ] {
            assert!(fits.len() <= MAX_ITEM_BYTES);
            match last_step(&batch(&[item("a", 1), fits.clone(), item("b", 1)])) {
                Step::Done(items) => assert_eq!(items[1].get(), fits),
                _ => panic!("an item within the bound is scanned"),
            }
        }
        let broken = format!(r#"{{"timers":[{{"key":"a",}}, {}]}}"#, item("b", 1));
        assert_eq!(answer(broken.as_bytes()), whole(broken.as_bytes()));
        assert!(matches!(
            answer(broken.as_bytes()),
            Err(ApiError::MalformedJson(_))
        ));
        // Cut short inside the bound: malformed, not too large.
        let cut = r#"{"timers":[{"key":"a","payload":"xx"#;
        assert_eq!(answer(cut.as_bytes()), whole(cut.as_bytes()));
        assert!(matches!(
            answer(cut.as_bytes()),
            Err(ApiError::MalformedJson(_))
        ));
    }

    #[test]
    fn a_plain_batch_is_split_into_its_items_across_steps() {
        let body = br#" { "timers" : [ {"key":"a","delay_ms":1} ,{"key":"b","payload":{"x":[1,2]}}
        ] } "#;
        let items = answer(body).expect("the plain shape");
        assert_eq!(
            items,
            [
                r#"{"key":"a","delay_ms":1}"#,
                r#"{"key":"b","payload":{"x":[1,2]}}"#
            ]
        );
    }

    /// Tiny items are asked about in sixteens; an item of 64 KiB is asked about at once.
    #[test]
    fn the_slice_is_asked_about_by_items_and_by_bytes() {
        let steps = |body: &[u8]| {
            let mut s = BatchScan::new(body);
            let mut n = 0;
            loop {
                n += 1;
                match s.step(|| true) {
                    Step::More => continue,
                    Step::Done(_) => return n,
                    Step::Refused(e) => panic!("{e}"),
                }
            }
        };
        let small = (0..64)
            .map(|i| item(&format!("k{i}"), 1))
            .collect::<Vec<_>>();
        assert_eq!(steps(&batch(&small)), 64 / ASK_EVERY + 1);
        let large = (0..5)
            .map(|i| item(&format!("k{i}"), 64 << 10))
            .collect::<Vec<_>>();
        assert_eq!(steps(&batch(&large)), 5 + 1);
    }

    /// Bodies of every shape, on one line and on several: the scan answers each as the
    /// whole-body parse does, the error's kind, message and position included.
    #[test]
    fn every_shape_gets_the_whole_body_parses_answer() {
        let many = (0..30)
            .map(|i| item(&format!("k{i}"), 3))
            .collect::<Vec<_>>()
            .join(",\n  ");
        let tails = [
            "]}",
            "],\"x\":1}",
            "],\"timers\":[]}",
            ",]}",
            "]} x",
            "]}\n\n  [",
            "]",
            "",
            ",",
            " {\"key\":\"z\"}]}",
            ", 1 2]}",
            ",\n{\"key\":\"a\",}]}",
            ",{\"key\":\"a\"\n\n   \"delay_ms\":1}]}",
            ",{\"key\":\"a\\q\"}]}",
            "]\n,\n\"\\u0078\":1}",
            ",{\"key\":\"a\",\"payload\":\"cut",
            "] ,\"timers\": 3}",
            ",[1,2],\"s\",null,-1.5e3,true]}",
        ];
        let mut bodies: Vec<Vec<u8>> = Vec::new();
        for tail in tails {
            for first in [item("a", 1), format!("\n{}\n", item("a", 1)), many.clone()] {
                bodies.push(format!("{{\"timers\":[{first}{tail}").into_bytes());
                bodies.push(format!("  [{first}{tail}").into_bytes());
            }
        }
        for body in [
            &br#"{"timers":[]}"#[..],
            br#"{"timers":[],"x":1}"#,
            br#"{"x":1,"timers":[{"key":"a"}]}"#,
            br#"{"\u0074imers":[{"key":"a"}]}"#,
            br#"{"\u0074\u0069\u006d\u0065\u0072\u0073" : [{"key":"a"}]}"#,
            br#"{"\u0074imer":[{"key":"a"}]}"#,
            br#"{"timers\u0000":[{"key":"a"}]}"#,
            br#"{"timers":[1,{"key":"a"}]}"#,
            br#"{"timers":{"key":"a"}}"#,
            br#"{"timers":"x"}"#,
            br#"{"timers" "x"}"#,
            br#"{"timers""#,
            br#"{"timers"#,
            br#"{"#,
            br#"{}"#,
            br#"{,}"#,
            br#"{"timers":[{"key":"a"}]} "#,
            br#"[]"#,
            br#"[1,2,]"#,
            br#"[{"key":"a"}] 1"#,
            br#""timers""#,
            b"12",
            b"nul",
            b"   ",
            b"",
            b"{\"timers\":[{\"key\":\"\xff\"}]}",
            b"{\"timers\":[{\"key\":\"a\"}\n\n,\n\n\xff]}",
        ] {
            bodies.push(body.to_vec());
        }
        for body in &bodies {
            assert_eq!(
                answer(body),
                whole(body),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// Past `MAX_BATCH_ITEMS`, the items are counted a step at a time, to the count the
    /// whole-body parse gives; at the bound exactly, the batch is scanned.
    #[test]
    fn too_many_items_are_counted_in_steps_as_the_whole_body_parse_counts_them() {
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
                    Step::Refused(ApiError::TooManyItems { count, .. }) => break count,
                    _ => panic!("{n} items: not counted"),
                }
            };
            assert_eq!(count, n);
            assert!(
                steps >= n / ASK_EVERY,
                "a step per 16 items when every slice is over"
            );
            assert_eq!(answer(&body), whole(&body));
        }
        let at = batch(
            &(0..MAX_BATCH_ITEMS)
                .map(|i| item(&format!("k{i}"), 1))
                .collect::<Vec<_>>(),
        );
        assert!(matches!(last_step(&at), Step::Done(items) if items.len() == MAX_BATCH_ITEMS));
    }

    /// A body of tiny values is scanned a value a step too: eight million numbers were 67 ms
    /// of one whole-body parse.
    #[test]
    fn an_array_of_tiny_values_is_scanned_in_steps() {
        let numbers = vec!["1"; 50_000].join(",");
        for body in [
            format!(r#"{{"timers":[{numbers}],"x":1}}"#),
            format!("[{numbers}]"),
        ] {
            let mut s = BatchScan::new(body.as_bytes());
            let mut steps = 0;
            let end = loop {
                steps += 1;
                match s.step(|| true) {
                    Step::More => continue,
                    Step::Refused(e) => break Err(e),
                    Step::Done(items) => break Ok(items.len()),
                }
            };
            assert!(steps >= 50_000 / ASK_EVERY, "{steps} steps");
            assert_eq!(
                end.map_err(|e| e.to_string()),
                whole(body.as_bytes())
                    .map(|i| i.len())
                    .map_err(|e| e.to_string())
            );
        }
    }

    /// A field name or value beside the array that does not end within the bound is refused
    /// without reading it (serde would copy a 16 MB name into its message).
    #[test]
    fn a_field_name_or_value_past_the_bound_is_refused_without_reading_it() {
        let long = "k".repeat(MAX_ITEM_BYTES + 1);
        for body in [
            format!(r#"{{"{long}":1}}"#),
            format!(r#"{{"timers":[{}],"{long}":1}}"#, item("a", 1)),
            format!(r#"{{"timers":"{long}"}}"#),
        ] {
            match answer(body.as_bytes()) {
                Err(ApiError::InvalidField(m)) => assert!(m.contains("is not read"), "{m}"),
                other => panic!("{other:?}"),
            }
        }
        match answer(format!(r#""{long}""#).as_bytes()) {
            Err(e) => assert_eq!(e, not_an_object("the body")),
            other => panic!("{other:?}"),
        }
        // Within the bound, serde's own answer.
        let short = format!(
            r#"{{"timers":[{}],"{}":1}}"#,
            item("a", 1),
            "k".repeat(1000)
        );
        assert_eq!(answer(short.as_bytes()), whole(short.as_bytes()));
    }

    /// Prints, per body shape the scan used to leave to the whole-body parse, that parse's
    /// time (what one step on the shard took) against the scan's longest step with a slice
    /// of 200 µs, and its total.
    ///
    /// `cargo test --release --lib batch_shapes_figure -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn batch_shapes_figure() {
        use std::time::{Duration, Instant};
        const BODY: usize = 16 << 20;
        let tiny = r#"{"key":"k","delay_ms":1}"#;
        let items = vec![tiny; BODY / (tiny.len() + 1)].join(",");
        let numbers = vec!["1"; BODY / 2].join(",");
        let shapes = [
            (
                "a field after the array",
                format!(r#"{{"timers":[{items}],"x":1}}"#),
            ),
            ("the key escaped", format!(r#"{{"\u0074imers":[{items}]}}"#)),
            ("a trailing comma", format!(r#"{{"timers":[{items},]}}"#)),
            (
                "items that are numbers",
                format!(r#"{{"timers":[{numbers}]}}"#),
            ),
            ("an array, not an object", format!("[{numbers}]")),
            (
                "an unknown field name",
                format!(r#"{{"{}":1}}"#, "k".repeat(BODY)),
            ),
        ];
        for round in 0..3 {
            for (name, body) in &shapes {
                let body = body.as_bytes();
                let t = Instant::now();
                let whole_answer = whole(body);
                let whole_ms = t.elapsed().as_secs_f64() * 1e3;
                let mut took = Vec::new();
                let mut scan = BatchScan::new(body);
                let all = Instant::now();
                let scanned = loop {
                    let t = Instant::now();
                    let step = scan.step(|| t.elapsed() >= Duration::from_micros(200));
                    took.push(t.elapsed());
                    match step {
                        Step::More => continue,
                        Step::Done(items) => break Ok(items.len()),
                        Step::Refused(e) => break Err(e),
                    }
                };
                let total_ms = all.elapsed().as_secs_f64() * 1e3;
                if *name == "an unknown field name" {
                    // Refused by the bound, not by serde's reading of the name.
                    assert!(scanned.is_err() && whole_answer.is_err());
                } else {
                    assert_eq!(scanned, whole_answer.map(|i| i.len()));
                }
                took.sort();
                let micros =
                    |q: f64| took[((took.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
                println!(
                    "round {round} {name:24} {:.1} MB: whole parse {whole_ms:.1} ms in one step; \
                     scan: {} steps, p50 {:.0} µs, p99 {:.0} µs, longest {:.0} µs (a preemption \
                     lands in it on a busy host), {total_ms:.1} ms in all",
                    body.len() as f64 / 1e6,
                    took.len(),
                    micros(0.5),
                    micros(0.99),
                    micros(1.0),
                );
            }
        }
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("{".to_string()),
            Just("}".to_string()),
            Just("[".to_string()),
            Just("]".to_string()),
            Just(",".to_string()),
            Just(":".to_string()),
            Just("\"timers\"".to_string()),
            Just("\"\\u0074imers\"".to_string()),
            Just("\"key\"".to_string()),
            Just(" ".to_string()),
            Just("\n".to_string()),
            Just("1".to_string()),
            Just("null".to_string()),
            Just("\"a\\\"b\"".to_string()),
            Just(r#"{"key":"a","delay_ms":1}"#.to_string()),
            Just("\"".to_string()),
            Just("\\".to_string()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// A batch with one thing changed (a fragment put in, a byte taken out), or any run
        /// of JSON fragments: the scan's answer is the whole-body parse's.
        #[test]
        fn any_body_gets_the_whole_body_parses_answer(
            n in 1usize..6,
            at in any::<prop::sample::Index>(),
            cut in any::<bool>(),
            put in fragment(),
            run in proptest::collection::vec(fragment(), 0..24),
        ) {
            let items = (0..n).map(|i| item(&format!("k{i}"), i)).collect::<Vec<_>>().join(",\n");
            let plain = format!("{{\"timers\": [\n{items}\n]}}");
            let i = at.index(plain.len() + 1);
            let mut changed = plain.as_bytes().to_vec();
            if cut && i < changed.len() {
                changed.remove(i);
            } else {
                changed.splice(i..i, put.bytes());
            }
            for body in [plain.into_bytes(), changed, run.concat().into_bytes()] {
                prop_assert_eq!(answer(&body), whole(&body), "{:?}", String::from_utf8_lossy(&body));
            }
        }
    }
}
