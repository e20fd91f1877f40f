//! __NAME__: a pgflow-wasm step handler. It gets the step input and the task context as
//! JSON and returns the output JSON, or an error message that fails the task.
use serde_json::{json, Value};

fn handle(input: &[u8], context: &[u8]) -> Result<String, String> {
    let input: Value = serde_json::from_slice(input).map_err(|e| format!("__NAME__: invalid input JSON: {e}"))?;
    // The flow input is under "run"; a step with dependencies also gets their outputs.
    let name = input["run"]["name"]
        .as_str()
        .ok_or(r#"__NAME__: input.run.name must be a string, e.g. {"name": "Ada"}"#)?;
    let context: Value = serde_json::from_slice(context).map_err(|e| format!("__NAME__: invalid context: {e}"))?;
    pgflow::log(pgflow::Level::Info, &format!("greeting {name}, attempt {}", context["attempt"]));
    Ok(json!({ "greeting": format!("Hello, {name}!") }).to_string())
}

pgflow::handler!(handle);

#[cfg(test)]
mod tests {
    use super::*;
    use pgflow::testing;

    // Calls the module's pgflow_handle as the worker does, with a test host.
    fn call(input: &str) -> testing::Outcome {
        let context = testing::context("__NAME__", "__NAME__");
        testing::call(pgflow_handle, input.as_bytes(), context.as_bytes())
    }

    #[test]
    fn greets_by_name() {
        let got = call(r#"{"run": {"name": "Ada"}}"#);
        assert_eq!(got.status, 0, "{got:?}");
        assert_eq!(got.output_str(), Some(r#"{"greeting":"Hello, Ada!"}"#));
        assert_eq!(got.logs, vec![(pgflow::Level::Info, "greeting Ada, attempt 1".to_string())]);
    }

    #[test]
    fn fails_without_a_name() {
        let got = call(r#"{"run": {}}"#);
        assert_eq!(got.status, 1, "{got:?}");
        assert_eq!(got.error.as_deref(), Some(r#"__NAME__: input.run.name must be a string, e.g. {"name": "Ada"}"#));
    }
}
