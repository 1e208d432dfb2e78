#![doc = include_str!("../README.md")]

/// How non-finite values are spelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonFinite {
    /// `nan`, `inf`, `-inf`: `repr()`, `str()` and f-strings.
    Python,
    /// `NaN`, `Infinity`, `-Infinity`: `json.dumps` (with its default `allow_nan=True`).
    Json,
}

/// Where formatted text goes: a `String` or a byte buffer, so the JSON writer appends straight
/// into its output without an intermediate allocation.
pub trait Sink {
    /// Appends ASCII text (all this crate writes).
    fn push_ascii(&mut self, text: &[u8]);
    /// Appends one ASCII byte.
    fn push_byte(&mut self, byte: u8);
}

impl Sink for String {
    #[inline]
    fn push_ascii(&mut self, text: &[u8]) {
        self.extend(text.iter().map(|&b| char::from(b)));
    }
    #[inline]
    fn push_byte(&mut self, byte: u8) {
        self.push(char::from(byte));
    }
}

impl Sink for Vec<u8> {
    #[inline]
    fn push_ascii(&mut self, text: &[u8]) {
        self.extend_from_slice(text);
    }
    #[inline]
    fn push_byte(&mut self, byte: u8) {
        self.push(byte);
    }
}

/// Python's `repr(x)` for a float: `nan`, `inf`, `-inf` for non-finite values.
pub fn repr_f64(x: f64) -> String {
    repr_f64_as(x, NonFinite::Python)
}

/// `repr(x)` with the chosen non-finite spelling ([`NonFinite::Json`]: what `json.dumps` writes).
pub fn repr_f64_as(x: f64, non_finite: NonFinite) -> String {
    let mut out = String::with_capacity(24);
    write_repr_f64(x, non_finite, &mut out);
    out
}

/// Appends Python's `repr(x)` with the chosen non-finite spelling: shortest round-trip digits,
/// scientific (`1e-05`, `1.5e+16`) iff the decimal exponent is < -4 or >= 16, else positional
/// with `.0` on integral values.
pub fn write_repr_f64<S: Sink + ?Sized>(x: f64, non_finite: NonFinite, out: &mut S) {
    if !x.is_finite() {
        out.push_ascii(non_finite_text(x.is_nan(), x > 0.0, non_finite));
        return;
    }
    let mut buf = zmij::Buffer::new();
    let text = buf.format_finite(x).as_bytes();
    if positional_as_python(text) {
        // Most values a dump holds: zmij's text is already Python's, so no re-layout.
        out.push_ascii(text);
        return;
    }
    let digits = Digits::parse(text);
    let scientific = !(-4..16).contains(&digits.exp10);
    layout(out, x.is_sign_negative(), &digits, scientific);
}

/// Whether zmij's text for a finite value is exactly Python's `repr`. zmij writes the same
/// shortest digits positionally for decimal exponents -5 to 15 (`0.00001`, `12.5`,
/// `1000000000000000.0`, with `.0` on integral values, a leading `-` on negative ones,
/// `-0.0`) and in its own scientific form (`1e+16`, `1.5e-7`) otherwise; Python writes
/// exponents -4 to 15 positionally, the same way. So the text is Python's unless it is
/// scientific or has the exponent -5 (`0.0000` and a non-zero digit).
#[inline]
fn positional_as_python(text: &[u8]) -> bool {
    let unsigned = text.strip_prefix(b"-").unwrap_or(text);
    !unsigned.starts_with(b"0.0000") && !text.contains(&b'e')
}

/// numpy's `str(np.float32(x))`: shortest digits that round-trip through float32, positional
/// iff `1e-4 <= |x| < 1e16` (or zero) by the value itself, not by its digits; so the float32
/// just below 1e-4 prints `1e-04`, where `repr(float)` would say `0.0001`.
pub fn str_f32(x: f32) -> String {
    let mut out = String::with_capacity(16);
    write_str_f32(x, &mut out);
    out
}

/// Appends [`str_f32`]'s text.
pub fn write_str_f32<S: Sink + ?Sized>(x: f32, out: &mut S) {
    if !x.is_finite() {
        out.push_ascii(non_finite_text(x.is_nan(), x > 0.0, NonFinite::Python));
        return;
    }
    let mut buf = zmij::Buffer::new();
    let digits = Digits::parse(buf.format_finite(x.abs()).as_bytes());
    let abs = x.abs();
    let scientific = !(abs == 0.0 || (1e-4..1e16).contains(&f64::from(abs)));
    layout(out, x.is_sign_negative(), &digits, scientific);
}

fn non_finite_text(nan: bool, positive: bool, spelling: NonFinite) -> &'static [u8] {
    match (spelling, nan, positive) {
        (NonFinite::Python, true, _) => b"nan",
        (NonFinite::Python, false, true) => b"inf",
        (NonFinite::Python, false, false) => b"-inf",
        (NonFinite::Json, true, _) => b"NaN",
        (NonFinite::Json, false, true) => b"Infinity",
        (NonFinite::Json, false, false) => b"-Infinity",
    }
}

/// Significant decimal digits of a non-negative value and the decimal exponent of the first:
/// value = d1.d2d3... × 10^exp10. Zero is the single digit `0` with exponent 0.
struct Digits {
    buf: [u8; 32],
    len: usize,
    exp10: i32,
}

impl Digits {
    /// Reads zmij's output, whichever of its layouts (`123.45`, `0.00012`, `1.5e+16`,
    /// `1e-7`, `100000.0`) it chose. zmij's digits are the ones Python and numpy print: the
    /// fewest that round-trip, of those the closest to the exact value, an exact tie going to
    /// the even digit (the recorded tables in tests/ check all three).
    #[inline]
    fn parse(text: &[u8]) -> Digits {
        // Locals, not fields, so the loop keeps them in registers (the JSON writer's hot path).
        let mut buf = [0u8; 32];
        let mut len = 0usize;
        let mut mantissa_digits = 0i32;
        let mut point_at: Option<i32> = None; // mantissa digits before the '.'
        let mut leading_zeros = 0i32; // zeros before the first significant digit
        let mut exp = 0i32;
        for (i, &c) in text.iter().enumerate() {
            match c {
                b'0'..=b'9' => {
                    mantissa_digits += 1;
                    if len == 0 && c == b'0' {
                        leading_zeros += 1;
                    } else if len < buf.len() {
                        buf[len] = c;
                        len += 1;
                    }
                }
                b'.' => point_at = Some(mantissa_digits),
                b'e' | b'E' => {
                    exp = parse_exponent(&text[i + 1..]);
                    break;
                }
                _ => {}
            }
        }
        while len > 0 && buf[len - 1] == b'0' {
            len -= 1;
        }
        if len == 0 {
            buf[0] = b'0';
            return Digits {
                buf,
                len: 1,
                exp10: 0,
            };
        }
        let int_len = point_at.unwrap_or(mantissa_digits);
        Digits {
            buf,
            len,
            exp10: exp + int_len - 1 - leading_zeros,
        }
    }

    #[inline]
    fn digits(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

#[inline]
fn parse_exponent(text: &[u8]) -> i32 {
    let (negative, magnitude) = match text.first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let value = magnitude
        .iter()
        .filter(|c| c.is_ascii_digit())
        .fold(0i32, |acc, &c| acc * 10 + i32::from(c - b'0'));
    if negative { -value } else { value }
}

const ZEROS: [u8; 24] = [b'0'; 24];

/// Appends Python's layout of digits: `d.ddde±XX` (at least two exponent digits) or positional,
/// where an integral value keeps a `.0`. Writes straight into `out`: this is the JSON writer's
/// inner loop.
fn layout<S: Sink + ?Sized>(out: &mut S, negative: bool, d: &Digits, scientific: bool) {
    let digits = d.digits();
    if negative {
        out.push_byte(b'-');
    }
    let exp10 = d.exp10;
    if scientific {
        out.push_byte(digits[0]);
        if digits.len() > 1 {
            out.push_byte(b'.');
            out.push_ascii(&digits[1..]);
        }
        let e = exp10.unsigned_abs();
        let sign = if exp10 < 0 { b'-' } else { b'+' };
        let tail = [
            b'e',
            sign,
            b'0' + (e / 100) as u8,
            b'0' + (e / 10 % 10) as u8,
            b'0' + (e % 10) as u8,
        ];
        // Two exponent digits at least, three when needed (`1e+300`).
        if e >= 100 {
            out.push_ascii(&tail);
        } else {
            out.push_ascii(&[tail[0], tail[1], tail[3], tail[4]]);
        }
    } else if exp10 < 0 {
        // At most three zeros after the point (exponent >= -4).
        out.push_ascii(b"0.");
        out.push_ascii(&ZEROS[..(-exp10 - 1) as usize]);
        out.push_ascii(digits);
    } else {
        // int_len <= 16 (exponent < 16), so the zero padding fits ZEROS.
        let int_len = exp10 as usize + 1;
        if digits.len() <= int_len {
            out.push_ascii(digits);
            out.push_ascii(&ZEROS[..int_len - digits.len()]);
            out.push_ascii(b".0");
        } else {
            out.push_ascii(&digits[..int_len]);
            out.push_byte(b'.');
            out.push_ascii(&digits[int_len..]);
        }
    }
}

/// Python's `json.dumps` of a string (`ensure_ascii=True`): `"` and `\\` escaped, `\n \r \t
/// \b \f` by name, every other character outside printable ASCII as `\uXXXX` (UTF-16 units).
pub fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_json_str(s, &mut out);
    out
}

/// Appends [`json_str`]'s text.
pub fn write_json_str(s: &str, out: &mut String) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(ch),
            _ => {
                let mut buf = [0u16; 2];
                for u in ch.encode_utf16(&mut buf) {
                    use std::fmt::Write as _;
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push('"');
}

/// Python's `repr()` of a str, as `str()` of a list or dict prints its strings: single quotes
/// unless the text holds a single quote and no double quote; `\\`, `\n`, `\r`, `\t` and the
/// quote escaped; the Latin-1 characters Python does not print (C0 and C1 controls, DEL,
/// no-break space, soft hyphen) as `\xhh`. Other non-printable characters above U+00FF (rare in
/// API arguments) stay as they are, where Python would escape them.
pub fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            '\0'..='\u{1f}' | '\u{7f}'..='\u{a0}' | '\u{ad}' => {
                use std::fmt::Write as _;
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `repr()` (same as `str()`) of a tuple of ints, which is how numpy shapes print:
/// `()`, `(3,)`, `(2, 3)`.
pub fn shape_tuple(shape: &[usize]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("(");
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{d}");
    }
    if shape.len() == 1 {
        out.push(',');
    }
    out.push(')');
    out
}

/// `float(text)` as Python parses it: surrounding whitespace, a sign, `inf`/`infinity`/`nan`
/// in any case, `_` between digits. (Python also reads non-ASCII decimal digits; those are
/// not numbers here.)
pub fn python_float(text: &str) -> Option<f64> {
    let t = text.trim();
    let (neg, unsigned) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let special =
        if unsigned.eq_ignore_ascii_case("inf") || unsigned.eq_ignore_ascii_case("infinity") {
            Some(f64::INFINITY)
        } else if unsigned.eq_ignore_ascii_case("nan") {
            Some(f64::NAN)
        } else {
            None
        };
    if let Some(x) = special {
        return Some(if neg { -x } else { x });
    }
    let b = unsigned.as_bytes();
    if b.is_empty()
        || !b
            .iter()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-' | b'_'))
    {
        return None;
    }
    // `_` only between two digits (`1_000`), as Python's grammar has it.
    for (i, &c) in b.iter().enumerate() {
        if c == b'_'
            && !(i > 0 && b[i - 1].is_ascii_digit() && b.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            return None;
        }
    }
    let x: f64 = unsigned.replace('_', "").parse().ok()?;
    Some(if neg { -x } else { x })
}

/// The first characters of a spreadsheet formula in msprobe's CSV blacklist
/// (`FileCheckConst.CSV_BLACK_LIST`): `+ - = % @` and their full-width forms.
fn formula_lead(c: char) -> bool {
    matches!(
        c,
        '+' | '-'
            | '='
            | '%'
            | '@'
            | '\u{ff0b}'
            | '\u{ff0d}'
            | '\u{ff1d}'
            | '\u{ff05}'
            | '\u{ff20}'
    )
}

/// Whether a cell would be read as a formula by a spreadsheet: msprobe's rule — not a number
/// (Python's `float()` fails) and it starts with a formula character or holds `;` followed by
/// one.
pub fn is_formula_cell(text: &str) -> bool {
    let starts = text.chars().next().is_some_and(formula_lead);
    let after_semicolon = || {
        text.split(';')
            .skip(1)
            .any(|rest| rest.chars().next().is_some_and(formula_lead))
    };
    (starts || after_semicolon()) && python_float(text).is_none()
}

/// A cell as numprobe writes it to a CSV or xlsx: a formula cell ([`is_formula_cell`]) gets
/// a leading `'`, which spreadsheets show as text and never evaluate; every other cell,
/// numbers like `-0.5`, `-inf` and `1e-05` included, is unchanged.
pub fn formula_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if is_formula_cell(text) {
        std::borrow::Cow::Owned(format!("'{text}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// One CSV record as Python's `csv.writer` writes it (excel dialect, `QUOTE_MINIMAL`), ended by
/// `line_end`: `"\r\n"` for `csv.writer`'s default, `"\n"` for pandas' `to_csv` on Linux.
/// Formula cells get a leading `'` ([`formula_safe`]): every CSV numprobe writes passes here.
pub fn csv_record<I>(fields: I, line_end: &str) -> String
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let mut out = String::new();
    write_csv_record(fields, line_end, &mut out);
    out
}

/// Appends [`csv_record`]'s text. A field is quoted iff it holds the delimiter `,`, the quote
/// `"` (doubled inside) or a character of `line_end`; so with `"\n"` a lone `\r` stays bare, as
/// Python's csv module does. A record that is one empty field is written `""`, so that it still
/// reads back as one field.
pub fn write_csv_record<I>(fields: I, line_end: &str, out: &mut String)
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    let start = out.len();
    let mut count = 0usize;
    for field in fields {
        if count > 0 {
            out.push(',');
        }
        count += 1;
        let field = formula_safe(field.as_ref());
        if field.contains(|c: char| c == ',' || c == '"' || line_end.contains(c)) {
            out.push('"');
            for (i, part) in field.split('"').enumerate() {
                if i > 0 {
                    out.push_str("\"\"");
                }
                out.push_str(part);
            }
            out.push('"');
        } else {
            out.push_str(&field);
        }
    }
    if count == 1 && out.len() == start {
        out.push_str("\"\"");
    }
    out.push_str(line_end);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `repr` through the digits and Python's layout only (the path before zmij's own text
    /// was taken where it is Python's).
    fn repr_by_layout(x: f64) -> String {
        let mut buf = zmij::Buffer::new();
        let digits = Digits::parse(buf.format_finite(x.abs()).as_bytes());
        let mut out = String::new();
        layout(
            &mut out,
            x.is_sign_negative(),
            &digits,
            !(-4..16).contains(&digits.exp10),
        );
        out
    }

    #[test]
    fn zmij_text_taken_only_where_it_is_pythons() {
        // Around every power of ten zmij or Python may switch layouts at, a few ulps each way,
        // both signs; then a spread of bit patterns.
        let mut xs = vec![
            0.0,
            -0.0,
            f64::MIN_POSITIVE,
            5e-324,
            f64::MAX,
            0.5,
            1.0,
            100000.0,
        ];
        for e in -330..=310 {
            let p = 10f64.powi(e);
            let mut below = p;
            let mut above = p;
            for _ in 0..4 {
                below = below.next_down();
                above = above.next_up();
                xs.extend([below, above]);
            }
            xs.push(p);
            xs.push(p * 1.5);
        }
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..200_000 {
            // xorshift64*: reproducible bit patterns over every exponent.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            xs.push(f64::from_bits(state.wrapping_mul(0x2545_f491_4f6c_dd1d)));
        }
        let mut taken = 0;
        for x in xs.into_iter().filter(|x| x.is_finite()) {
            for x in [x, -x] {
                let mut buf = zmij::Buffer::new();
                taken += usize::from(positional_as_python(buf.format_finite(x).as_bytes()));
                assert_eq!(repr_f64(x), repr_by_layout(x), "{x:e} ({:#x})", x.to_bits());
            }
        }
        assert!(taken > 1000, "the shortcut was taken {taken} times");
    }

    #[test]
    fn formula_cells_get_a_quote_and_numbers_do_not() {
        for num in [
            "-0.5",
            "-inf",
            " -inf",
            "1e-05",
            "+1",
            "-1_000.5",
            "-NaN",
            "-Infinity",
            "-3",
        ] {
            assert!(python_float(num).is_some(), "{num}");
            assert_eq!(formula_safe(num), num);
        }
        for (cell, want) in [
            ("=HYPERLINK(\"x\")", "'=HYPERLINK(\"x\")"),
            ("+cmd", "'+cmd"),
            ("-1+1", "'-1+1"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("%x", "'%x"),
            ("\u{ff1d}1+1", "'\u{ff1d}1+1"),
            ("Torch.abs;=1+1", "'Torch.abs;=1+1"),
            ("a;\u{ff20}b", "'a;\u{ff20}b"),
            ("-_1", "'-_1"),
        ] {
            assert_eq!(formula_safe(cell), want, "{cell}");
        }
        for plain in [
            "Torch.abs.0.forward",
            "a; =b",
            "N/A",
            "unsupported",
            "",
            "a-b=c",
        ] {
            assert_eq!(formula_safe(plain), plain);
        }
        assert_eq!(
            csv_record(["=1+1", "-0.5", "a,-b"], "\n"),
            "'=1+1,-0.5,\"a,-b\"\n"
        );
    }

    #[test]
    fn repr_layouts() {
        for (x, want) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (3.0, "3.0"),
            (100.0, "100.0"),
            (0.1, "0.1"),
            (-2.25, "-2.25"),
            (1e-5, "1e-05"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (0.00012345, "0.00012345"),
            (1e15, "1000000000000000.0"),
            (9999999999999998.0, "9999999999999998.0"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e22, "1e+22"),
            (1e300, "1e+300"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-5e-324, "-5e-324"),
            (1.5497207641601562e-06, "1.5497207641601562e-06"),
        ] {
            assert_eq!(repr_f64(x), want, "{x:e}");
        }
    }

    #[test]
    fn non_finite_spellings() {
        let json = |x: f64| {
            let mut v = Vec::new();
            write_repr_f64(x, NonFinite::Json, &mut v);
            String::from_utf8(v).unwrap()
        };
        assert_eq!(json(f64::NAN), "NaN");
        assert_eq!(json(-f64::NAN), "NaN");
        assert_eq!(json(f64::INFINITY), "Infinity");
        assert_eq!(json(f64::NEG_INFINITY), "-Infinity");
        assert_eq!(json(0.5), "0.5");
        assert_eq!(repr_f64(f64::NAN), "nan");
        assert_eq!(repr_f64(f64::NEG_INFINITY), "-inf");
        assert_eq!(str_f32(f32::INFINITY), "inf");
    }

    #[test]
    fn float32_switches_on_value() {
        assert_eq!(str_f32(1e-4), "1e-04");
        assert_eq!(str_f32(0.0001001), "0.0001001");
        assert_eq!(str_f32(1e16), "1e+16");
        assert_eq!(str_f32(123456789.0), "123456790.0");
        assert_eq!(str_f32(-0.0), "-0.0");
    }

    #[test]
    fn shapes_print_as_tuples() {
        assert_eq!(shape_tuple(&[]), "()");
        assert_eq!(shape_tuple(&[5]), "(5,)");
        assert_eq!(shape_tuple(&[2, 3, 0]), "(2, 3, 0)");
    }

    #[test]
    fn csv_quoting_depends_on_line_end() {
        let fields = ["a", "(3,)", "x\ny", "q\"", "r\rs", ""];
        assert_eq!(
            csv_record(fields, "\r\n"),
            "a,\"(3,)\",\"x\ny\",\"q\"\"\",\"r\rs\",\r\n"
        );
        assert_eq!(
            csv_record(fields, "\n"),
            "a,\"(3,)\",\"x\ny\",\"q\"\"\",r\rs,\n"
        );
        assert_eq!(csv_record([""], "\r\n"), "\"\"\r\n");
        assert_eq!(csv_record(["", ""], "\n"), ",\n");
        assert_eq!(csv_record(Vec::<String>::new(), "\n"), "\n");
    }
}
