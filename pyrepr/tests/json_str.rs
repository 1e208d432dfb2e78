//! `json_str` against CPython 3.11's `json.dumps` of the same strings (recorded output).

#[test]
fn matches_cpython_json_dumps() {
    for (input, cpython) in [
        ("a\"b\\c", r#""a\"b\\c""#),
        ("tab\there\nnl\r\u{8}\u{c}", r#""tab\there\nnl\r\b\f""#),
        ("é中😀", r#""\u00e9\u4e2d\ud83d\ude00""#),
        ("\u{0}\u{1f}\u{7f} ~", r#""\u0000\u001f\u007f ~""#),
        ("", r#""""#),
    ] {
        assert_eq!(pyrepr::json_str(input), cpython, "{input:?}");
    }
}
