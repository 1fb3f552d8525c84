//! The fast path of line parsing: flat objects of unsigned integers, plain strings and
//! booleans, which is what writers produce. Anything else (escapes, signs, fractions, nesting, duplicate keys,
//! the summary) is left to serde_json, which then also words the errors. The result is always
//! what serde_json would give: the reader's tests check both paths agree.

use super::line::RawLine;
use std::borrow::Cow;

/// A JSON value the fast path understands.
enum Value<'a> {
    Int(u64),
    Str(&'a str),
    Bool(bool),
}

/// The fields of `text` when it is a flat object the fast path understands, else `None`.
pub(super) fn parse(text: &[u8]) -> Option<RawLine<'_>> {
    let mut cur = Cursor { text, pos: 0 };
    let mut raw = RawLine::default();
    cur.skip_ws();
    cur.eat(b'{')?;
    cur.skip_ws();
    if cur.peek() == Some(b'}') {
        cur.pos += 1;
    } else {
        loop {
            let key = cur.string()?;
            cur.skip_ws();
            cur.eat(b':')?;
            cur.skip_ws();
            let value = cur.value()?;
            store(&mut raw, key, value)?;
            cur.skip_ws();
            match cur.next()? {
                b',' => cur.skip_ws(),
                b'}' => break,
                _ => return None,
            }
        }
    }
    cur.skip_ws();
    (cur.pos == text.len()).then_some(raw)
}

/// Puts `value` into the field `key`; `None` for a repeated field, a wrong type or a field the
/// fast path leaves to serde_json.
fn store<'a>(raw: &mut RawLine<'a>, key: &str, value: Value<'a>) -> Option<()> {
    fn set<T>(slot: &mut Option<T>, value: T) -> Option<()> {
        slot.is_none().then(|| *slot = Some(value))
    }
    match (key, value) {
        ("p", Value::Int(v)) => set(&mut raw.p, v),
        ("cpu_ns", Value::Int(v)) => set(&mut raw.cpu_ns, v),
        ("msg", Value::Int(v)) => set(&mut raw.msg, v),
        ("bytes", Value::Int(v)) => set(&mut raw.bytes, v),
        ("coll", Value::Int(v)) => set(&mut raw.coll, v),
        ("size", Value::Int(v)) => set(&mut raw.size, u32::try_from(v).ok()?),
        ("k", Value::Str(s)) => set(&mut raw.k, Cow::Borrowed(s)),
        ("op", Value::Str(s)) => set(&mut raw.op, Cow::Borrowed(s)),
        ("rendezvous", Value::Bool(b)) => set(&mut raw.rendezvous, b),
        ("after", Value::Int(v)) => set(&mut raw.after, v),
        ("t_ns", Value::Int(v)) => set(&mut raw.t_ns, v),
        (
            "p" | "cpu_ns" | "msg" | "bytes" | "coll" | "size" | "k" | "op" | "rendezvous"
            | "after" | "t_ns" | "summary",
            _,
        ) => None,
        _ => Some(()), // a field readers ignore
    }
}

/// A position in the line.
struct Cursor<'a> {
    text: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.pos += 1;
        Some(b)
    }

    fn eat(&mut self, expected: u8) -> Option<()> {
        (self.next()? == expected).then_some(())
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// A string without escapes or control characters.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.pos;
        let len = self.text[start..]
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        self.pos = start + len;
        self.eat(b'"')?;
        std::str::from_utf8(&self.text[start..start + len]).ok()
    }

    /// An unsigned integer without leading zeros, a plain string, `true` or `false`.
    fn value(&mut self) -> Option<Value<'a>> {
        match self.peek()? {
            b'"' => return self.string().map(Value::Str),
            b't' | b'f' => {
                let rest = &self.text[self.pos..];
                let (word, value) = if rest.starts_with(b"true") {
                    (4, true)
                } else if rest.starts_with(b"false") {
                    (5, false)
                } else {
                    return None;
                };
                self.pos += word;
                return Some(Value::Bool(value));
            }
            _ => {}
        }
        let start = self.pos;
        let mut n: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.pos += 1;
        }
        let digits = self.pos - start;
        let leading_zero = digits > 1 && self.text[start] == b'0';
        (digits > 0 && !leading_zero).then_some(Value::Int(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What serde_json makes of `text`, for comparison.
    fn serde(text: &[u8]) -> Option<RawLine<'_>> {
        serde_json::from_slice(text).ok()
    }

    #[test]
    fn takes_what_writers_write() {
        let line = br#"{"p":3,"k":"coll_start","cpu_ns":0,"coll":9,"op":"bcast","size":4,"bytes":18446744073709551615}"#;
        let raw = parse(line).expect("the fast path takes it");
        assert_eq!(Some(raw), serde(line));
        let spaced =
            b" { \"k\" : \"exit\" ,\t\"t_ns\": 5, \"note\": \"x\", \"p\":0 , \"cpu_ns\":1}\r\n";
        assert_eq!(parse(spaced), serde(spaced));
        assert!(parse(spaced).is_some());
        let rendezvous = br#"{"p":1,"k":"send","cpu_ns":0,"msg":2,"bytes":3,"rendezvous":true}"#;
        let raw = parse(rendezvous).expect("the fast path takes a flag");
        assert_eq!(raw.rendezvous, Some(true));
        assert_eq!(Some(raw), serde(rendezvous));
    }

    #[test]
    fn leaves_the_rest_to_serde() {
        for line in [
            &br#"{"p":-1,"k":"exit","cpu_ns":0}"#[..],
            br#"{"p":1.0,"k":"exit","cpu_ns":0}"#,
            br#"{"p":01,"k":"exit","cpu_ns":0}"#,
            br#"{"p":1,"p":2,"k":"exit","cpu_ns":0}"#,
            br#"{"p":1,"k":"ex\u0069t","cpu_ns":0}"#,
            br#"{"p":1,"k":"exit","cpu_ns":0,"extra":{"a":1}}"#,
            br#"{"p":1,"k":"exit","cpu_ns":18446744073709551616}"#,
            br#"{"p":1,"k":"coll_start","size":4294967296}"#,
            br#"{"p":null,"k":"exit","cpu_ns":0}"#,
            br#"{"summary":{"measured_seconds":1,"lost_events":0}}"#,
            br#"{"p":1,"k":"exit","cpu_ns":0} x"#,
            br#"{"p":1,"k":"exit","cpu_ns":0,}"#,
            br#"{"p":1 "k":"exit"}"#,
            br#"{"p":1,"k":"send","rendezvous":truth}"#,
            br#"{"p":1,"k":"send","rendezvous":1}"#,
        ] {
            assert_eq!(parse(line), None, "{}", String::from_utf8_lossy(line));
        }
    }

    /// A line with the given fields in order, each a JSON value as text.
    fn object(fields: &[(String, String)], ws: &str) -> String {
        let body: Vec<_> = fields
            .iter()
            .map(|(k, v)| format!("\"{k}\"{ws}:{ws}{v}"))
            .collect();
        format!("{{{ws}{}{ws}}}", body.join(&format!("{ws},{ws}")))
    }

    fn field() -> impl Strategy<Value = (String, String)> {
        let key = prop_oneof![
            Just("p"),
            Just("k"),
            Just("cpu_ns"),
            Just("msg"),
            Just("bytes"),
            Just("coll"),
            Just("op"),
            Just("size"),
            Just("rendezvous"),
            Just("t_ns"),
            Just("summary"),
        ];
        let value = prop_oneof![
            any::<u64>().prop_map(|v| v.to_string()),
            (0u64..10).prop_map(|v| v.to_string()),
            Just("\"send\"".to_string()),
            Just("\"allreduce\"".to_string()),
            Just("\"a\\\"b\"".to_string()),
            Just("-3".to_string()),
            Just("2.5".to_string()),
            Just("null".to_string()),
            Just("{}".to_string()),
            Just("007".to_string()),
            Just("4294967296".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            Just("tru".to_string()),
            Just("falsey".to_string()),
        ];
        (key, value).prop_map(|(k, v)| (k.to_string(), v))
    }

    proptest! {
        /// Whenever the fast path answers, serde_json gives the same fields.
        #[test]
        fn agrees_with_serde(fields in prop::collection::vec(field(), 0..8), spaced in any::<bool>()) {
            let line = object(&fields, if spaced { " " } else { "" });
            if let Some(raw) = parse(line.as_bytes()) {
                prop_assert_eq!(Some(raw), serde(line.as_bytes()), "{}", line);
            }
        }

        /// The same for arbitrary damage to a valid line.
        #[test]
        fn agrees_with_serde_on_damaged_lines(at in 0usize..80, byte in any::<u8>()) {
            let mut line =
                br#"{"p":12,"k":"send","cpu_ns":3400,"msg":7,"bytes":4096,"rendezvous":true}"#
                    .to_vec();
            let at = at % line.len();
            line[at] = byte;
            if let Some(raw) = parse(&line) {
                prop_assert_eq!(Some(raw), serde(&line));
            }
        }
    }
}
