//! word_count: one map element, a string -> `{"text":<the string>,"words":<count>}`
use serde_json::Value;

fn word_count(input: &[u8], _context: &[u8]) -> Result<String, String> {
    let input: Value = serde_json::from_slice(input)
        .map_err(|e| format!("word_count: invalid JSON input: {e}"))?;
    let text = input.as_str().ok_or("word_count: input must be a JSON string")?;
    // split_whitespace splits on Unicode White_Space, as the other languages do.
    let words = text.split_whitespace().count();
    Ok(format!(r#"{{"text":{},"words":{words}}}"#, jsonfmt::quote(text)))
}

pgflow::handler!(word_count);
