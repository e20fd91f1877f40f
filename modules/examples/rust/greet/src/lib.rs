//! greet: `{"run": {"name": "Ada"}}` -> `{"greeting":"Hello, Ada!"}`
use serde_json::Value;

fn greet(input: &[u8], _context: &[u8]) -> Result<String, String> {
    let input: Value =
        serde_json::from_slice(input).map_err(|e| format!("greet: invalid JSON input: {e}"))?;
    let name = input
        .get("run")
        .and_then(|run| run.get("name"))
        .and_then(Value::as_str)
        .ok_or("greet: input.run.name must be a string")?;
    let greeting = jsonfmt::quote(&format!("Hello, {name}!"));
    Ok(format!(r#"{{"greeting":{greeting}}}"#))
}

pgflow::handler!(greet);
