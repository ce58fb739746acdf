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
#[path = "scan_tests.rs"]
mod tests;
