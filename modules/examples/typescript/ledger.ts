// The ledger example in TypeScript: {"amount": 5} -> {"inserted": 1, "total": 5}.
//
// Inserts (run_id, task_index, amount) into the application's table app.ledger through
// ctx.sql (postgres.js's API: sql(row) writes the insert's columns and values), as the step's
// role (its `sql` section in flows.yaml), then reads back the total of the run's rows. Each
// value is a parameter, never text of the statement. In a transactional step the row
// commits together with pgflow's completion of the task.
type Sql = {
  (strings: TemplateStringsArray, ...values: unknown[]): Promise<Array<Record<string, unknown>> & { count: number }>;
  (row: Record<string, unknown>): unknown;
};
type Ctx = { flowInput: { amount?: unknown }; stepTask: { run_id: string; task_index: number }; sql: Sql };

export default async function ledger(_input: unknown, ctx: Ctx) {
  const { amount } = ctx.flowInput;
  if (typeof amount !== "number" || !Number.isInteger(amount)) throw new Error("ledger: the flow input's amount must be a whole number");
  const { run_id, task_index } = ctx.stepTask;
  const inserted = await ctx.sql`insert into app.ledger ${ctx.sql({ run_id, task_index, amount })}`;
  const [row] = await ctx.sql`select coalesce(sum(amount), 0)::int as total from app.ledger where run_id = ${run_id}`;
  return { inserted: inserted.count, total: row.total };
}
