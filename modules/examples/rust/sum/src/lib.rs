//! sum: adds up every number in its input, at any depth, in document order, as doubles from
//! 0: `[1,[2,{"x":3}],"a"]` -> `{"sum":6}`. A step with dependencies gets `{"run": <flow
//! input>, "<dep>": <its output>, ...}`: when the input is an object with "run" and another
//! member, the flow input is left out and only the other members count
//! (`{"run":[10],"a":[1,2]}` -> `{"sum":3}`).
use serde_json::Value;

fn sum(input: &[u8], _context: &[u8]) -> Result<String, String> {
    let root: Value =
        serde_json::from_slice(input).map_err(|e| format!("sum: invalid JSON input: {e}"))?;
    let skip_run = matches!(&root, Value::Object(members)
        if members.contains_key("run") && members.len() > 1);
    let mut total = 0.0;
    for number in numbers(input, skip_run) {
        // std's exact parser; a number too large for a double reads as infinity.
        let x: f64 = number.parse().map_err(|_| "sum: invalid JSON input")?;
        if !x.is_finite() {
            return Err(format!("sum: number {} is out of range", shorten(number)));
        }
        total += x;
    }
    let total = jsonfmt::number(total).ok_or("sum: the sum is not a finite number")?;
    Ok(format!(r#"{{"sum":{total}}}"#))
}

/// The text of every number in `json` (valid JSON) in document order, leaving out the
/// values of the root object's "run" members when `skip_run` is set. It reads the text, not
/// a `Value`, because a serde_json map keeps one value per repeated name where the other
/// languages count every member.
fn numbers(json: &[u8], skip_run: bool) -> Vec<&str> {
    let mut found = Vec::new();
    let (mut i, mut depth, mut in_run) = (0, 0, false);
    while i < json.len() {
        let start = i;
        i += 1;
        match json[start] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth -= 1,
            b'"' => {
                while json[i] != b'"' {
                    i += if json[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                // A string in the root object followed by a colon is a member name.
                if skip_run && depth == 1 && next_byte(json, i) == Some(b':') {
                    in_run = serde_json::from_slice::<String>(&json[start..i])
                        .map_or(false, |name| name == "run");
                }
            }
            b'-' | b'0'..=b'9' => {
                while i < json.len()
                    && matches!(json[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                if !in_run {
                    found.push(
                        std::str::from_utf8(&json[start..i]).expect("a JSON number is ASCII"),
                    );
                }
            }
            _ => {} // whitespace, ',', ':' and the letters of true, false and null
        }
    }
    found
}

/// The first byte at or after `i` that is not JSON whitespace.
fn next_byte(json: &[u8], i: usize) -> Option<u8> {
    json[i..]
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// A number's text cut for an error message: one out of range can have hundreds of digits.
fn shorten(number: &str) -> String {
    if number.len() > 40 {
        format!("{}...", &number[..40])
    } else {
        number.to_string()
    }
}

pgflow::handler!(sum);
