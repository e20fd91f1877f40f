// ctx.sql in a transactional step as postgres.js handlers write it: a row, a failed statement
// caught, a row in a sql.begin block, then the run's rows read back. {"fail": true} fails the
// first attempt after its writes (internal/worker: TestACaughtStatementLeavesTheTaskExactlyOnce).
type Ctx = { sql: any; stepTask: { run_id: string; attempt: number }; flowInput: { fail?: boolean } };

export default async function caught(_input: unknown, ctx: Ctx) {
  const run = ctx.stepTask.run_id;
  await ctx.sql`insert into app.ledger values (${run}, 0, 1)`;
  let code = "";
  try {
    await ctx.sql`insert into app.ledger values (${"not a uuid"}, 0, 1)`;
  } catch (e: any) {
    code = e.code;
  }
  await ctx.sql.begin(async (sql: any) => {
    await sql`insert into app.ledger values (${run}, 1, 2)`;
  });
  const [r] = await ctx.sql`select count(*)::int as n, sum(amount)::int as total from app.ledger where run_id = ${run}`;
  if (ctx.flowInput.fail && ctx.stepTask.attempt === 1) throw new Error("failed after writing");
  return { code, ...r };
}
