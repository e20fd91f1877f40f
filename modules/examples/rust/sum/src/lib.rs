//! sum: adds up the first array among the input object's values (or the input itself when
//! it is an array): `{"run":[1,2,3]}` -> `{"sum":6}`. Doubles, added left to right from 0.
use serde_json::Value;

fn sum(input: &[u8], _context: &[u8]) -> Result<String, String> {
    // preserve_order keeps the object's members in input order, so "first" means first.
    let input: Value =
        serde_json::from_slice(input).map_err(|e| format!("sum: invalid JSON input: {e}"))?;
    let numbers = match &input {
        Value::Array(items) => Some(items),
        Value::Object(members) => members.values().find_map(Value::as_array),
        _ => None,
    }
    .ok_or("sum: input has no array of numbers")?;
    let mut total = 0.0;
    for (i, item) in numbers.iter().enumerate() {
        if !item.is_number() {
            return Err(format!("sum: element {i} is not a number"));
        }
        // as_f64 is None for a number too large for a double (e.g. 1e400).
        total += item
            .as_f64()
            .ok_or_else(|| format!("sum: element {i} is out of range"))?;
    }
    let total = jsonfmt::number(total).ok_or("sum: the sum is not a finite number")?;
    Ok(format!(r#"{{"sum":{total}}}"#))
}

pgflow::handler!(sum);
