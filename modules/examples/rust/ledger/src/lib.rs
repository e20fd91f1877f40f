//! ledger: `{"run": {"amount": 5}}` -> `{"inserted": 1, "total": 5}`
//!
//! Inserts `(run_id, task_index, amount)` into the application's table `app.ledger` as the
//! step's role (its `sql` section in flows.yaml), then reads back the total of the run's
//! rows. In a transactional step the row commits together with pgflow's completion of the
//! task: a retried or crashed task never inserts it twice.
use pgflow::sql;
use serde_json::Value;

fn ledger(input: &[u8], context: &[u8]) -> Result<String, String> {
    let input: Value = serde_json::from_slice(input).map_err(|e| format!("ledger: invalid JSON input: {e}"))?;
    let amount = input
        .get("run")
        .and_then(|run| run.get("amount"))
        .and_then(Value::as_i64)
        .ok_or("ledger: input.run.amount must be a whole number")?;
    let context: Value = serde_json::from_slice(context).map_err(|e| format!("ledger: invalid context: {e}"))?;
    let run_id = context["run_id"].as_str().ok_or("ledger: the context has no run_id")?;
    let task_index = context["task_index"].as_i64().ok_or("ledger: the context has no task_index")?;

    let inserted = sql::query(
        "insert into app.ledger (run_id, task_index, amount) values ($1, $2, $3)",
        &[run_id.into(), task_index.into(), amount.into()],
    )
    .map_err(|e| e.to_string())?;
    let inserted: Value = serde_json::from_str(&inserted).map_err(|e| e.to_string())?;
    let total = sql::query("select coalesce(sum(amount), 0) as total from app.ledger where run_id = $1", &[run_id.into()])
        .map_err(|e| e.to_string())?;
    let total: Value = serde_json::from_str(&total).map_err(|e| e.to_string())?;
    Ok(format!(r#"{{"inserted":{},"total":{}}}"#, inserted["row_count"], total["rows"][0][0]))
}

pgflow::handler!(ledger);
