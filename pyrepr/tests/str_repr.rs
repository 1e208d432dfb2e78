//! `str_repr` against `repr()` of CPython 3.11, recorded (`python3 -c "print(repr(s))"`).

#[test]
fn str_repr_matches_cpython() {
    for (s, python) in [
        ("a'b", r#""a'b""#),
        ("a\"b", r#"'a"b'"#),
        ("a'b\"c", r#"'a\'b"c'"#),
        ("tab\there", r"'tab\there'"),
        ("nl\n", r"'nl\n'"),
        ("bs\\", r"'bs\\'"),
        (
            "\u{1}\u{7f}\u{80}\u{9f}\u{a0}\u{ad}é",
            r"'\x01\x7f\x80\x9f\xa0\xadé'",
        ),
        ("File x, line 1", "'File x, line 1'"),
        ("", "''"),
    ] {
        assert_eq!(pyrepr::str_repr(s), python, "{s:?}");
    }
}
