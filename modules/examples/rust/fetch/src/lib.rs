//! fetch: `{"run": {"url": "https://..."}}` -> `{"status":200,"bytes":1256}`
//!
//! GETs the URL through the host (the step's `http.allow` in flows.yaml must cover it). An
//! HTTP error status is an output like any other; a refused request fails the task with
//! the host's message.
use serde_json::Value;

fn fetch(input: &[u8], _context: &[u8]) -> Result<String, String> {
    let input: Value =
        serde_json::from_slice(input).map_err(|e| format!("fetch: invalid JSON input: {e}"))?;
    let url = input
        .get("run")
        .and_then(|run| run.get("url"))
        .and_then(Value::as_str)
        .ok_or("fetch: input.run.url must be a string")?;
    let resp = pgflow::http::get(url).map_err(|e| e.to_string())?;
    Ok(format!(r#"{{"status":{},"bytes":{}}}"#, resp.status, resp.body.len()))
}

pgflow::handler!(fetch);
