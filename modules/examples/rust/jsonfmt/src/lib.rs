//! The canonical JSON output every example language shares, so that the same input gives
//! the same output bytes whichever language built the handler: no spaces, strings escaped
//! as RFC 8785 does (only `"`, `\` and control characters), numbers as ECMAScript's
//! `Number.prototype.toString` prints them (also RFC 8785): `6`, `0.30000000000000004`,
//! `1.5e-7`, `1e+21`.

/// `s` as a JSON string.
pub fn quote(s: &str) -> String {
    // serde_json escapes exactly the RFC 8785 set, with lowercase \u00xx.
    serde_json::to_string(s).expect("a str always serializes")
}

/// `x` as a JSON number, or None when it is not finite (JSON has no NaN or infinity).
pub fn number(x: f64) -> Option<String> {
    if !x.is_finite() {
        return None;
    }
    if x == 0.0 {
        return Some("0".into()); // also -0, as ECMAScript prints it
    }
    // The shortest correctly rounded digits that read back as x: "-1.2345e-7". Not `{:e}`,
    // whose shortest mode rounds ties up (966049109423706.25 -> ...706.3) where ECMAScript,
    // Go and C pick the even digit (...706.2); the fixed-precision mode rounds ties to even.
    let sci = (1..=17)
        .map(|digits| format!("{:.*e}", digits - 1, x))
        .find(|s| s.parse::<f64>() == Ok(x))
        .expect("17 significant digits always read back");
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp always has an exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32;
    let n = exp.parse::<i32>().expect("LowerExp exponent is an integer") + 1; // x = 0.digits * 10^n
    let body = if k <= n && n <= 21 {
        format!("{}{}", digits, "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{}", "0".repeat(-n as usize), digits)
    } else {
        let fraction = if k > 1 { format!(".{}", &digits[1..]) } else { String::new() };
        let e = n - 1;
        format!("{}{}e{}{}", &digits[..1], fraction, if e >= 0 { "+" } else { "-" }, e.abs())
    };
    Some(format!("{}{}", sign, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_ecmascript_does() {
        let cases: &[(f64, &str)] = &[
            (6.0, "6"),
            (-0.0, "0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e21, "1e+21"),
            (1.5e300, "1.5e+300"),
            (0.000001, "0.000001"),
            (1.5e-7, "1.5e-7"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (9007199254740993.0, "9007199254740992"),
            (966049109423706.25, "966049109423706.2"),
            (-1735861081509656.25, "-1735861081509656.2"),
        ];
        for (x, want) in cases {
            assert_eq!(number(*x).as_deref(), Some(*want), "number({:e})", x);
        }
        assert_eq!(number(f64::INFINITY), None);
        assert_eq!(number(f64::NAN), None);
    }

    #[test]
    fn strings_escape_only_quotes_backslashes_and_controls() {
        assert_eq!(quote("Ada"), r#""Ada""#);
        assert_eq!(quote("a\"b\\c/d"), r#""a\"b\\c/d""#);
        assert_eq!(
            quote("\u{8}\t\n\u{c}\r\u{1}\u{1f}\u{7f}"),
            "\"\\b\\t\\n\\f\\r\\u0001\\u001f\u{7f}\""
        );
        assert_eq!(quote("<é\u{2028}😀>"), "\"<é\u{2028}😀>\"");
    }
}
