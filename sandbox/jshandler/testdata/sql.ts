// ctx.sql as postgres.js: result types, parameter types, helpers, sql.begin and a failed
// statement caught (sandbox/jshandler/sql_test.go runs each case on a real database; the
// table app.items is the test's).
type Rows = Array<Record<string, any>> & { count: number; command: string; columns: Array<{ name: string; type: number }> };
type Sql = any;

const kind = (v: unknown) =>
  v === null ? "null" : v instanceof Date ? "Date" : v instanceof Uint8Array ? "Uint8Array" : Array.isArray(v) ? "array" : typeof v;

async function types(sql: Sql) {
  const rows: Rows = await sql`select 9007199254740993::int8 as i8, 12345678901234567890.5::numeric as num, 42 as i4,
    1.5::float8 as f8, true as b, '2024-02-29 12:34:56.789+00'::timestamptz as tstz, '2024-02-29'::date as d,
    '2024-02-29 01:02:03'::timestamp as ts, array['a', 'b c', '"q"\\', null]::text[] as ta, array[[1, 2], [3, 4]] as ia,
    array[9007199254740993]::int8[] as i8a, '{"a": [1, "x"]}'::jsonb as jb, '[1,2]'::json as j, '\\x00ff'::bytea as by,
    null::int as n, 'x'::text as t, gen_random_uuid() is not null as u`;
  const r = rows[0];
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) {
    out[k] = [kind(v), v instanceof Date ? v.toISOString() : v instanceof Uint8Array ? Array.from(v) : v];
  }
  return { row: out, count: rows.count, command: rows.command, columns: rows.columns.map((c) => c.name + ":" + c.type) };
}

async function params(sql: Sql) {
  const [r] = await sql`select ${9007199254740993n}::text as big, extract(epoch from ${new Date("2024-01-02T03:04:05.678Z")})::text as epoch,
    ${new Uint8Array([0, 255, 16])} as by, ${[1, 2, 3]}::int[] as ia, ${["x", 'y "z"', "a\\b", null]}::text[] as ta,
    ${sql.json({ a: [1, "x"] })} as jb, 2 = any(${[1, 2]}::int[]) as anyof, ${"it's"} as s, ${null}::int as n, ${true} as b`;
  return { ...r, by: Array.from(r.by as Uint8Array) };
}

async function helpers(sql: Sql) {
  const out: Record<string, unknown> = {};
  await sql`insert into app.items ${sql({ id: 1, name: "a", tags: ["x", "y"], meta: { k: 1 } })}`;
  const ins: Rows = await sql`insert into app.items ${sql([{ id: 2, name: "b", extra: 1 }, { id: 3, name: "c", extra: 2 }], "id", "name")} returning id`;
  out.insertMany = [ins.count, ins.command, ins.map((r) => r.id)];
  const upd: Rows = await sql`update app.items set ${sql({ name: "A", extra: 9 }, "name")} where id = ${1}`;
  out.update = [upd.count, upd.command];
  out.in = (await sql`select id from app.items where id in ${sql([1, 3])} order by id`).map((r: any) => r.id);
  out.emptyIn = (await sql`select id from app.items where id in ${sql([])}`).length;
  out.identifiers = await sql`select ${sql("name")} from ${sql("app.items")} where ${sql("id")} = 1`;
  out.columnList = await sql`select ${sql(["id", "name"])} from app.items order by id`;
  out.unsafe = await sql.unsafe("select count(*)::int as n from app.items where id > $1", [1]);
  const only = (id: number | null) => (id === null ? sql`` : sql`where id = ${id}`);
  out.fragment = [(await sql`select id from app.items ${only(2)}`).length, (await sql`select id from app.items ${only(null)}`).length];
  out.values = await sql`select 1 as a, 'b' as b`.values();
  out.row1 = (await sql`select tags, meta from app.items where id = 1`)[0];
  return out;
}

async function transactions(sql: Sql) {
  const codes: unknown[] = [];
  const insert = (s: Sql, id: unknown) => s`insert into app.items ${s({ id, name: "t" })}`;
  await insert(sql, 10);
  try {
    await insert(sql, "not a number");
  } catch (e: any) {
    codes.push(e.code); // caught: the task's transaction goes on
  }
  await insert(sql, 11);
  const committed = await sql.begin(async (tx: Sql) => {
    await insert(tx, 12);
    const [c] = await tx`select count(*)::int as n from app.items where id >= 10`;
    return c.n;
  });
  try {
    await sql.begin(async (tx: Sql) => {
      await insert(tx, 13);
      throw new Error("rolled back by the handler");
    });
  } catch (e: any) {
    codes.push(e.message);
  }
  try {
    await sql.begin(async (tx: Sql) => {
      await insert(tx, 14);
      await tx`select 1 / 0`;
    });
  } catch (e: any) {
    codes.push(e.code);
  }
  await sql.begin(async (tx: Sql) => {
    await insert(tx, 15);
    try {
      await tx.savepoint(async (sp: Sql) => {
        await insert(sp, 16);
        await sp`select 1 / 0`;
      });
    } catch (e: any) {
      codes.push("savepoint " + e.code);
    }
    await insert(tx, 17);
  });
  try {
    // A statement that failed inside a block and was caught there: the block cannot commit.
    await sql.begin(async (tx: Sql) => {
      await insert(tx, 18);
      await tx`select 1 / 0`.catch(() => {});
    });
  } catch (e: any) {
    codes.push(e.code);
  }
  const ids = (await sql`select id from app.items where id >= 10 order by id`).map((r: any) => r.id);
  return { committed, codes, ids };
}

async function edges(sql: Sql) {
  const out: Record<string, unknown> = {};
  out.options = await sql.begin("isolation level serializable", async () => 1).catch((e: Error) => e.message);
  out.readWrite = await sql.begin("read write", async (tx: Sql) => (await tx`select 1 as one`)[0].one);
  out.arrayResult = (await sql.begin(async (tx: Sql) => [tx`select 1 as a`, tx`select 2 as a`])).map((r: Rows) => r[0].a);
  try {
    sql();
    out.noArgument = "no error";
  } catch (e: any) {
    out.noArgument = e.constructor.name;
  }
  out.unsafeFragment = await sql`select ${sql.unsafe("$1", [1])}`.catch((e: Error) => e.message);
  out.unsafeInline = (await sql`select ${sql.unsafe("42")} as n`)[0].n;
  const [f] = await sql`select 'NaN'::float8 as a, '-Infinity'::float8 as b, '[0:1]={5,6}'::int[] as c, '{}'::text[] as d`;
  out.special = [String(f.a), String(f.b), f.c, f.d];
  const q = sql`insert into app.items (id, name) values (${100}, ${"once"})`;
  await q;
  await q; // a query runs once, however often it is awaited
  out.once = (await sql`select count(*)::int as n from app.items where id = 100`)[0].n;
  return out;
}

export default async function handler(input: { case: string }, ctx: { sql: Sql }) {
  switch (input.case) {
    case "types":
      return types(ctx.sql);
    case "params":
      return params(ctx.sql);
    case "helpers":
      return helpers(ctx.sql);
    case "transactions":
      return transactions(ctx.sql);
    case "edges":
      return edges(ctx.sql);
    case "denied":
      return ctx.sql`select 1`.catch((e: any) => [e.code, e.message]);
  }
  throw new Error("unknown case " + input.case);
}
