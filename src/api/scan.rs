//! The batch body (`{"timers": [ … ]}`): the one parser that says what a batch is and what
//! error each body that is not one gets, and that reads a body a piece at a time, so that a
//! 16 MiB body is never parsed in one synchronous pass on the shard that read it: the caller
//! scans for a slice of time, yields to the executor (the shard's wheel runs), and goes on.
//! [`parse_batch`] is the same scan without slices, for callers that hold no shard.
//!
//! The grammar is the batch's own: an object with one field, `timers`, an array of at least
//! one and at most [`MAX_BATCH_ITEMS`] items, each any JSON value (each item is checked on
//! its own later, so that one bad item fails alone). Its refusals ([`Fault`]) are worded as
//! serde_json words them, position included, so that a client reads the same kind of message
//! for a bad batch as for a bad single registration (`body.rs`). serde reads only values: one
//! item (or one element of a body that is an array), one key, and a `timers` or a body that is
//! not an array or an object (to word its type), each from a window of at most
//! [`MAX_ITEM_BYTES`] of the body.
//!
//! What no valid body holds is refused by its bound, without reading it all: an item that
//! does not end within `MAX_ITEM_BYTES` (`413`: a 16 MiB item was 45 ms of one step), and a
//! field name or value beside the array longer than that (`400 invalid_field`; serde would
//! copy the name into its message). A body that is not an object is refused as one without
//! reading past a first value that long.
//!
//! Cost: one serde pass over each item, a count of its newlines, and a few bytes of
//! punctuation between items.

use super::body::{item_too_large, json_error_at, not_an_object, MAX_BATCH_ITEMS, MAX_ITEM_BYTES};
use super::error::ApiError;
use serde::de::{Deserialize, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// Where a scan stands.
pub enum Step<'a> {
    /// Every item, in order.
    Done(Vec<&'a RawValue>),
    /// The slice of time is up; call again.
    More,
    /// Not a batch the service takes: the error its grammar gives, or a refusal by a bound
    /// (see the module doc).
    Refused(ApiError),
}

/// The body's items, or the error the scan gives, in one go.
pub fn parse_batch(body: &[u8]) -> Result<Vec<&RawValue>, ApiError> {
    let mut scan = BatchScan::new(body);
    loop {
        match scan.step(|| false) {
            Step::Done(items) => return Ok(items),
            Step::More => continue,
            Step::Refused(e) => return Err(e),
        }
    }
}

/// What the scan expects next.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum At {
    /// The body's value.
    Start,
    /// After `{`: the key `timers`, or `}`.
    FirstKey,
    /// After the key: `:`.
    Colon,
    /// After `:`: `[`.
    Open,
    /// After `[`: the first item, or `]`.
    First,
    /// After an item: `,` or `]`.
    AfterItem,
    /// After `]`: `}` (or `,` and a second key, refused).
    Close,
    /// A body that is an array, refused once it is known to be JSON: after `[`.
    ArrayFirst,
    /// After one of its elements: `,` or `]`.
    ArrayAfter,
    /// After `,`: an element.
    ArrayItem,
    /// After the body's value: nothing but whitespace.
    End,
}

/// Why a body is not a batch, at a byte: the grammar's refusals, in serde_json's words.
enum Fault {
    /// `EOF while parsing an object` (a `{` not closed).
    EofInObject,
    /// `EOF while parsing a list`.
    EofInList,
    /// `EOF while parsing a value`.
    EofInValue,
    /// `expected `:``, after the key.
    Colon,
    /// `expected `,` or `]``, after an item.
    ListCommaOrEnd,
    /// `expected `,` or `}``, after the array.
    ObjectCommaOrEnd,
    /// `key must be a string`.
    KeyNotString,
    /// `trailing comma`, before `]` or `}`.
    TrailingComma,
    /// `trailing characters`, after the body's value.
    TrailingCharacters,
    /// `missing field `timers``, `duplicate field `timers``, `unknown field …` (a field of
    /// the object: `invalid_field`).
    Field(String),
}

impl Fault {
    fn words(&self) -> &str {
        match self {
            Fault::EofInObject => "EOF while parsing an object",
            Fault::EofInList => "EOF while parsing a list",
            Fault::EofInValue => "EOF while parsing a value",
            Fault::Colon => "expected `:`",
            Fault::ListCommaOrEnd => "expected `,` or `]`",
            Fault::ObjectCommaOrEnd => "expected `,` or `}`",
            Fault::KeyNotString => "key must be a string",
            Fault::TrailingComma => "trailing comma",
            Fault::TrailingCharacters => "trailing characters",
            Fault::Field(m) => m,
        }
    }

    fn error(&self, message: String) -> ApiError {
        match self {
            Fault::Field(_) => ApiError::InvalidField(message),
            _ => ApiError::MalformedJson(message),
        }
    }
}

/// A field's refusal in serde's words (`missing field `timers``, …).
fn field(e: serde_json::Error) -> Fault {
    Fault::Field(e.to_string())
}

/// What serde made of the value at the scan's position.
enum Read<T> {
    /// The value, and where it ends.
    Value(T, usize),
    /// A number or a literal that ends where a byte that cannot follow one stands; the
    /// value is not kept (the grammar refuses what follows).
    Ended(usize),
    /// It does not end within the window (`MAX_ITEM_BYTES`).
    Long,
    /// Not a JSON value: serde's error, in the window's lines and columns.
    Bad(serde_json::Error),
}

/// `timers` that is not an array: serde's refusal of its type, in its words ("invalid type:
/// string \"x\", expected an array of timers").
struct NotArray;

impl<'de> Deserialize<'de> for NotArray {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NotArray;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of timers")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<NotArray, A::Error> {
                Ok(NotArray)
            }
        }
        d.deserialize_seq(V)
    }
}

/// `over` is asked after this many items, an item of `ASK_BYTES` or more counting as one
/// more for each: tiny items (a body of millions of numbers) are not each worth a clock read,
/// and a large one (up to `MAX_ITEM_BYTES`) is asked after at once.
const ASK_EVERY: usize = 16;
const ASK_BYTES: usize = 4096;

pub struct BatchScan<'a> {
    body: &'a [u8],
    pos: usize,
    at: At,
    items: Vec<&'a RawValue>,
    /// Items scanned past the first [`MAX_BATCH_ITEMS`] (or every element of an array).
    beyond: usize,
    /// The line (from 1) of `counted`, and where that line starts: the newlines before
    /// `counted` are counted as the scan goes, a slice at a time (at each `Step::More`), so
    /// that a refusal counts at most one slice's bytes.
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
            let next = self.peek();
            let went = match (self.at, next) {
                (At::Start, Some(b'{')) => self.pass(At::FirstKey),
                (At::Start, Some(b'[')) => self.pass(At::ArrayFirst),
                (At::Start, None) => Err(self.fault(Fault::EofInValue, self.pos)),
                (At::Start, Some(_)) => self.first_value(),
                (At::FirstKey, Some(b'}')) => {
                    let missing = <serde_json::Error as serde::de::Error>::missing_field;
                    Err(self.field_fault(missing("timers"), self.pos))
                }
                (At::FirstKey, Some(b'"')) => self.key(false),
                (At::FirstKey | At::Colon | At::Close, None) => {
                    Err(self.fault(Fault::EofInObject, self.pos))
                }
                (At::FirstKey, Some(_)) => Err(self.peek_fault(Fault::KeyNotString)),
                (At::Colon, Some(b':')) => self.pass(At::Open),
                (At::Colon, Some(_)) => Err(self.peek_fault(Fault::Colon)),
                (At::Open, Some(b'[')) => self.pass(At::First),
                (At::Open, None) => Err(self.fault(Fault::EofInValue, self.pos)),
                (At::Open, Some(_)) => self.not_array(),
                (At::First | At::AfterItem | At::ArrayFirst | At::ArrayAfter, None) => {
                    Err(self.fault(Fault::EofInList, self.pos))
                }
                (At::First | At::AfterItem, Some(b']')) => self.pass(At::Close),
                (At::ArrayFirst | At::ArrayAfter, Some(b']')) => self.pass(At::End),
                (At::AfterItem, Some(b',')) => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b']') => Err(self.peek_fault(Fault::TrailingComma)),
                        None => Err(self.fault(Fault::EofInValue, self.pos)),
                        Some(_) => self.item(),
                    }
                }
                (At::ArrayAfter, Some(b',')) => self.pass(At::ArrayItem),
                (At::AfterItem | At::ArrayAfter, Some(_)) => {
                    Err(self.peek_fault(Fault::ListCommaOrEnd))
                }
                (At::First, Some(_)) => self.item(),
                (At::ArrayFirst | At::ArrayItem, Some(_)) => self.element(),
                (At::ArrayItem, None) => Err(self.fault(Fault::EofInValue, self.pos)),
                (At::Close, Some(b'}')) => self.pass(At::End),
                (At::Close, Some(b',')) => {
                    self.pos += 1;
                    match self.peek() {
                        Some(b'"') => self.key(true),
                        Some(b'}') => Err(self.peek_fault(Fault::TrailingComma)),
                        Some(_) => Err(self.peek_fault(Fault::KeyNotString)),
                        None => Err(self.fault(Fault::EofInValue, self.pos)),
                    }
                }
                (At::Close, Some(_)) => Err(self.peek_fault(Fault::ObjectCommaOrEnd)),
                (At::End, Some(_)) => Err(self.peek_fault(Fault::TrailingCharacters)),
                (At::End, None) => return self.finish(),
            };
            match went {
                Err(e) => return Step::Refused(e),
                Ok(false) => {}
                Ok(true) => {
                    self.unasked += 1 + (self.pos - self.asked_at) / ASK_BYTES;
                    self.asked_at = self.pos;
                    if self.unasked >= ASK_EVERY {
                        self.unasked = 0;
                        if over() {
                            self.count_lines(self.pos);
                            return Step::More;
                        }
                    }
                }
            }
        }
    }

    /// The answer for a body that ended well formed.
    fn finish(&mut self) -> Step<'a> {
        if self.beyond > 0 || self.items.is_empty() {
            return Step::Refused(match self.body.get(self.skip_ws(0)) {
                Some(b'{') if self.beyond > 0 => ApiError::TooManyItems {
                    count: MAX_BATCH_ITEMS + self.beyond,
                    limit: MAX_BATCH_ITEMS,
                },
                Some(b'{') => ApiError::EmptyBatch,
                _ => not_an_object("the body"),
            });
        }
        Step::Done(std::mem::take(&mut self.items))
    }

    /// Steps over the byte `peek` just saw, and on to `at`. (Each step is `Ok(true)` when
    /// it read an item or an element, which `over` is asked after.)
    fn pass(&mut self, at: At) -> Result<bool, ApiError> {
        self.pos += 1;
        self.at = at;
        Ok(false)
    }

    /// A body that is neither an object nor an array: refused as not an object once it is
    /// known to be JSON.
    fn first_value(&mut self) -> Result<bool, ApiError> {
        match self.read::<IgnoredAny>(MAX_ITEM_BYTES) {
            Read::Value(_, end) | Read::Ended(end) => {
                self.pos = end;
                self.at = At::End;
                Ok(false)
            }
            Read::Long => Err(not_an_object("the body")),
            Read::Bad(e) => Err(self.value_fault(&e)),
        }
    }

    /// The key at `pos` (a `"`): `timers` the first time, else the field's refusal.
    fn key(&mut self, again: bool) -> Result<bool, ApiError> {
        let (key, end) = if self.body[self.pos..].starts_with(br#""timers""#) {
            (Cow::Borrowed("timers"), self.pos + 8)
        } else {
            match self.read::<Cow<'a, str>>(MAX_ITEM_BYTES) {
                Read::Value(key, end) => (key, end),
                Read::Bad(e) => return Err(self.value_fault(&e)),
                Read::Ended(_) | Read::Long => return Err(not_read()),
            }
        };
        use serde::de::Error;
        match &*key {
            "timers" if again => Err(self.field_fault(Error::duplicate_field("timers"), end)),
            "timers" => {
                self.pos = end;
                self.at = At::Colon;
                Ok(false)
            }
            other => Err(self.field_fault(Error::unknown_field(other, &["timers"]), end)),
        }
    }

    /// `timers` that is not an array: serde's words for its type.
    fn not_array(&mut self) -> Result<bool, ApiError> {
        match self.read::<NotArray>(MAX_ITEM_BYTES) {
            Read::Bad(e) => Err(self.value_fault(&e)),
            Read::Value(..) | Read::Ended(_) | Read::Long => Err(not_read()),
        }
    }

    /// An item of the batch: its JSON text, any value. At most [`MAX_ITEM_BYTES`] are read
    /// for it, so one item costs at most that much parsing, whatever the body holds.
    fn item(&mut self) -> Result<bool, ApiError> {
        self.at = At::AfterItem;
        let too_large = || {
            let items = self.items.len() + self.beyond;
            item_too_large(&format!("batch item {items}"))
        };
        // One byte past the bound, to tell an item of exactly the bound from a longer one.
        match self.read::<&'a RawValue>(MAX_ITEM_BYTES + 1) {
            Read::Value(_, end) | Read::Ended(end) if end - self.pos > MAX_ITEM_BYTES => {
                Err(too_large())
            }
            Read::Value(item, end) => {
                if self.items.len() < MAX_BATCH_ITEMS {
                    self.items.push(item);
                } else {
                    self.beyond += 1;
                }
                self.pos = end;
                Ok(true)
            }
            Read::Ended(end) => {
                self.pos = end;
                Ok(true)
            }
            Read::Long => Err(too_large()),
            Read::Bad(e) => Err(self.value_fault(&e)),
        }
    }

    /// An element of a body that is an array (read as serde reads any value, not kept).
    fn element(&mut self) -> Result<bool, ApiError> {
        self.at = At::ArrayAfter;
        match self.read::<IgnoredAny>(MAX_ITEM_BYTES + 1) {
            Read::Value(_, end) | Read::Ended(end) if end - self.pos <= MAX_ITEM_BYTES => {
                self.pos = end;
                Ok(true)
            }
            Read::Bad(e) => Err(self.value_fault(&e)),
            Read::Value(..) | Read::Ended(_) | Read::Long => Err(not_an_object("the body")),
        }
    }

    /// serde's reading of one value of type `T` at `pos`, from at most `window` bytes.
    fn read<T: Deserialize<'a>>(&self, window: usize) -> Read<T> {
        let rest: &'a [u8] = &self.body[self.pos..];
        let cut = rest.len() > window;
        let seen = &rest[..rest.len().min(window)];
        // A number or a literal is not known to end where the window cuts it.
        let delimited = matches!(seen.first(), Some(b'"' | b'[' | b'{'));
        let mut values = serde_json::Deserializer::from_slice(seen).into_iter::<T>();
        let next = values.next();
        let end = values.byte_offset();
        match next {
            _ if cut && end == seen.len() && !delimited => Read::Long,
            Some(Ok(value)) => Read::Value(value, self.pos + end),
            // serde read a number or a literal, then a byte no value may be followed by.
            Some(Err(_)) if end > 0 => Read::Ended(self.pos + end),
            Some(Err(e)) if e.is_eof() && cut => Read::Long,
            Some(Err(e)) => Read::Bad(e),
            None => Read::Long,
        }
    }

    /// `fault` at the byte index `at` (serde's index: the bytes it had read).
    fn fault(&mut self, fault: Fault, at: usize) -> ApiError {
        let (line, column) = self.position(at);
        fault.error(format!("{} at line {line} column {column}", fault.words()))
    }

    /// `fault` at the byte `peek` saw (serde counts it as read).
    fn peek_fault(&mut self, fault: Fault) -> ApiError {
        let at = self.body.len().min(self.pos + 1);
        self.fault(fault, at)
    }

    /// A field's refusal, raised where its key ends (`at`): serde counts the whitespace after
    /// it as read, and the object's `}` if that comes next.
    fn field_fault(&mut self, e: serde_json::Error, at: usize) -> ApiError {
        let mut at = self.skip_ws(at);
        if self.body.get(at) == Some(&b'}') {
            at += 1;
        }
        self.fault(field(e), at)
    }

    /// serde's error for the value at `pos`, its line and column moved from the window's
    /// to the body's.
    fn value_fault(&mut self, e: &serde_json::Error) -> ApiError {
        let full = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let what = match full.strip_suffix(&suffix) {
            Some(what) if e.line() > 0 => what,
            _ => return json_error_at(e, full),
        };
        // The window's line `e.line()` starts after its `e.line() - 1`th newline.
        let window = &self.body[self.pos..];
        let line_start = match e.line() - 1 {
            0 => 0,
            n => window
                .iter()
                .enumerate()
                .filter(|(_, &b)| b == b'\n')
                .nth(n - 1)
                .map_or(window.len(), |(i, _)| i + 1),
        };
        let at = (self.pos + line_start + e.column()).min(self.body.len());
        let (line, column) = self.position(at);
        json_error_at(e, format!("{what} at line {line} column {column}"))
    }

    /// The line (from 1) and column (the bytes before it on its line) of the byte index `at`,
    /// as serde counts them.
    fn position(&mut self, at: usize) -> (usize, usize) {
        if at < self.counted {
            self.line = 1;
            self.line_start = 0;
            self.counted = 0;
        }
        self.count_lines(at);
        (self.line, at - self.line_start)
    }

    /// Counts the newlines between the last count and `to`.
    fn count_lines(&mut self, to: usize) {
        let seen = &self.body[self.counted..to];
        if let Some(i) = seen.iter().rposition(|&b| b == b'\n') {
            self.line += seen.iter().filter(|&&b| b == b'\n').count();
            self.line_start = self.counted + i + 1;
        }
        self.counted = to;
    }

    /// Where the whitespace from `from` ends.
    fn skip_ws(&self, from: usize) -> usize {
        let rest = self.body.get(from..).unwrap_or_default();
        from + rest
            .iter()
            .take_while(|&&b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .count()
    }

    /// The next byte past whitespace, which the scan then stands on.
    fn peek(&mut self) -> Option<u8> {
        self.pos = self.skip_ws(self.pos);
        self.body.get(self.pos).copied()
    }
}

/// The refusal of a field name or value beside the array that does not end within the bound.
fn not_read() -> ApiError {
    ApiError::InvalidField(format!(
        "a batch body holds one field, `timers`, an array of items; a field name or value of \
         more than {MAX_ITEM_BYTES} bytes is not read"
    ))
}

#[cfg(test)]
#[path = "scan_tests.rs"]
mod tests;
