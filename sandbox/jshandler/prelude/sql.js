// ctx.sql: postgres.js's API (the `postgres` npm package, which pgflow's worker hands its
// handlers as ctx.sql) on the ABI's sql_query (abi/SPEC.md, SQL). A module of the prelude
// (bundled with it by build.go): prelude.js calls it once with the engine's natives and
// gives the result to every task as ctx.sql. Nothing
// here may depend on a task: the host keeps the task's session (its transaction and open
// blocks).
//
// What differs from postgres.js is written in docs/guests.md: statements run one at a time
// on the task's one session, so a statement of the outer sql sent while a sql.begin block
// is open runs inside that block.
export default function pgflowSQL(natives) {
  "use strict";
  const native = natives.sql;
  const define = (obj, name, value) =>
    Object.defineProperty(obj, name, { value, writable: true, configurable: true, enumerable: false });

  // ---- type OIDs -----------------------------------------------------------------------------

  const T = {
    bool: 16, bytea: 17, int8: 20, int2: 21, int4: 23, oid: 26, json: 114, float4: 700, float8: 701,
    numeric: 1700, date: 1082, timestamp: 1114, timestamptz: 1184, jsonb: 3802,
  };
  // array type -> element type, for the arrays whose elements are decoded.
  const arrayOf = {
    1000: T.bool, 1001: T.bytea, 1005: T.int2, 1007: T.int4, 1016: T.int8, 1028: T.oid, 1021: T.float4,
    1022: T.float8, 1231: T.numeric, 199: T.json, 3807: T.jsonb, 1182: T.date, 1115: T.timestamp, 1185: T.timestamptz,
    1009: 25, 1015: 1043, 1014: 1042, 2951: 2950, 1002: 18, 1003: 19, 1041: 869, 651: 650, 1040: 829,
  };

  // ---- results: PostgreSQL's text of each value, decoded as postgres.js does -----------------

  const hexBytes = (s) => {
    const out = new Uint8Array((s.length - 2) >> 1);
    for (let i = 0; i < out.length; i++) out[i] = parseInt(s.substr(2 + 2 * i, 2), 16);
    return out;
  };
  // "2024-02-29", "2024-02-29 12:00:00.123456", "... +01", "... -03:30", "... +00:09:21"
  const dateText = /^(\d{4,})-(\d\d)-(\d\d)(?:[ T](\d\d):(\d\d):(\d\d)(?:\.(\d+))?)?(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?( BC)?$/;
  function parseDate(s) {
    const m = dateText.exec(s);
    if (!m || m[12]) return new Date(s === "infinity" ? Infinity : s === "-infinity" ? -Infinity : NaN);
    const ms = m[7] ? Math.floor(Number((m[7] + "00").slice(0, 3))) : 0;
    const d = new Date(0);
    // Without an offset (date, timestamp) the value is taken as UTC, the sandbox's time zone.
    d.setUTCFullYear(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
    d.setUTCHours(Number(m[4] ?? 0), Number(m[5] ?? 0), Number(m[6] ?? 0), ms);
    if (m[8]) {
      const off = (Number(m[9]) * 3600 + Number(m[10] ?? 0) * 60 + Number(m[11] ?? 0)) * 1000;
      return new Date(d.getTime() - (m[8] === "-" ? -off : off));
    }
    return d;
  }

  // Splits an array's text ({1,2}, {"a b",NULL}, {{1,2},{3,4}}, [0:1]={1,2}) into nested JS
  // arrays of element texts (null for NULL), then decodes each element.
  function parseArray(s, elem) {
    let i = s.startsWith("[") ? s.indexOf("=") + 1 : 0;
    function list() {
      const out = [];
      i++; // {
      if (s[i] === "}") { i++; return out; }
      for (;;) {
        if (s[i] === "{") out.push(list());
        else if (s[i] === '"') {
          let v = "";
          for (i++; s[i] !== '"'; i++) v += s[i] === "\\" ? s[++i] : s[i];
          i++;
          out.push(decode(elem, v));
        } else {
          let j = i;
          while (s[j] !== "," && s[j] !== "}") j++;
          const v = s.slice(i, j);
          i = j;
          out.push(v === "NULL" ? null : decode(elem, v));
        }
        if (s[i++] === "}") return out;
      }
    }
    return list();
  }

  function decode(oid, v) {
    if (v === null) return null;
    switch (oid) {
      case T.bool: return v === "t";
      case T.int2: case T.int4: case T.oid: case T.float4: case T.float8: return Number(v);
      case T.json: case T.jsonb: return JSON.parse(v);
      case T.date: case T.timestamp: case T.timestamptz: return parseDate(v);
      case T.bytea: return hexBytes(v);
    }
    if (oid in arrayOf) return parseArray(v, arrayOf[oid]);
    return v; // int8 and numeric stay strings (every digit), as all other types
  }

  // ---- parameters ------------------------------------------------------------------------------

  class Parameter {
    constructor(value, type, array) {
      this.value = value;
      this.type = type;
      this.array = array;
    }
  }
  const hexOf = (b) => "\\x" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  const bytesOf = (v) =>
    v instanceof Uint8Array ? v : v instanceof ArrayBuffer ? new Uint8Array(v)
    : ArrayBuffer.isView(v) ? new Uint8Array(v.buffer, v.byteOffset, v.byteLength) : null;
  // An array parameter's text: PostgreSQL's array literal, each element quoted.
  function arrayText(a) {
    return "{" + a.map((x) => {
      if (x === null || x === undefined) return "NULL";
      if (Array.isArray(x)) return arrayText(x);
      const t = scalarText(x);
      return '"' + String(t).replace(/\\/g, "\\\\").replace(/"/g, '\\"') + '"';
    }).join(",") + "}";
  }
  function scalarText(v) {
    if (v instanceof Date) return v.toISOString();
    const b = bytesOf(v);
    if (b) return hexOf(b);
    if (typeof v === "bigint") return String(v);
    if (typeof v === "object") return JSON.stringify(v);
    return v;
  }
  // [JSON value for the request, type OID or 0]
  function serialize(v) {
    if (v instanceof Parameter) {
      if (v.value === null || v.value === undefined) return [null, v.type];
      if (v.type === T.json || v.type === T.jsonb) return [JSON.stringify(v.value), v.type];
      if (Array.isArray(v.value)) return [arrayText(v.value), v.type];
      return [scalarText(v.value), v.type];
    }
    if (v === undefined || v === null) return [null, 0];
    if (v instanceof Date) return [v.toISOString(), T.timestamptz];
    if (bytesOf(v)) return [hexOf(bytesOf(v)), T.bytea];
    if (typeof v === "bigint") return [String(v), T.int8];
    if (typeof v === "boolean") return [v, T.bool];
    if (Array.isArray(v)) return [arrayText(v), 0];
    if (typeof v === "object") return [JSON.stringify(v), 0];
    if (typeof v === "number" && !Number.isFinite(v)) return [String(v), 0];
    return [v, 0];
  }

  // ---- building a statement: fragments, helpers, identifiers ------------------------------------

  const escapeIdentifier = (s) => '"' + String(s).replace(/"/g, '""').replace(/\./g, '"."') + '"';

  // A statement being built: its text and its parameters.
  class Builder {
    constructor() {
      this.text = "";
      this.params = [];
      this.types = [];
    }
    param(v) {
      const [value, type] = serialize(v);
      this.params.push(value);
      this.types.push(type);
      return "$" + this.params.length;
    }
    value(v) {
      if (v instanceof Query) v.inline(this);
      else if (v instanceof Helper) this.text += v.build(this);
      else this.text += this.param(v);
    }
  }

  // sql(...) with anything but a template: identifiers, or the values and columns of an
  // insert, update, select or IN list, chosen by the keyword before it as postgres.js does.
  class Helper {
    constructor(first, rest) {
      this.first = first;
      this.columns = rest.flat();
    }
    build(b) {
      const { first } = this;
      if (typeof first === "string" && this.columns.length === 0) return escapeIdentifier(first);
      const kw = lastKeyword(b.text);
      const rows = Array.isArray(first) ? first : [first];
      const objects = rows.length > 0 && rows[0] !== null && typeof rows[0] === "object" && !Array.isArray(rows[0]) && !(rows[0] instanceof Date) && !bytesOf(rows[0]);
      const cols = this.columns.length > 0 ? this.columns : objects ? Object.keys(rows[0]) : [];
      const row = (r) => "(" + (Array.isArray(r) ? r : objects ? cols.map((c) => r[c]) : [r]).map((v) => b.param(v)).join(",") + ")";
      switch (kw) {
        case "insert":
          if (!objects) throw new TypeError("sql(): an insert takes an object or an array of objects: sql`insert into t ${sql(rows, 'a', 'b')}`");
          return "(" + cols.map(escapeIdentifier).join(",") + ")values" + rows.map(row).join(",");
        case "update":
        case "set":
          if (!objects) throw new TypeError("sql(): an update takes an object: sql`update t set ${sql(row, 'a', 'b')}`");
          return cols.map((c) => escapeIdentifier(c) + "=" + b.param(first[c])).join(",");
        case "in":
          if (rows.length === 0) return "(null)";
          return "(" + rows.map((v) => b.param(v)).join(",") + ")";
        case "values":
          if (objects || rows.every(Array.isArray)) return rows.map(row).join(",");
          return row(rows);
      }
      // select, returning, as, "(" or anywhere else: a list of identifiers.
      if (objects) return cols.map(escapeIdentifier).join(",");
      if (rows.every((x) => typeof x === "string")) return rows.map(escapeIdentifier).join(",");
      return "(" + rows.map((v) => b.param(v)).join(",") + ")";
    }
  }
  const keywords = /(?:^|[^\w$])(insert|update|set|values|in|select|returning|as)(?![\w$])/gi;
  function lastKeyword(text) {
    let kw;
    for (const m of text.matchAll(keywords)) kw = m[1].toLowerCase();
    return /\(\s*$/.test(text) ? "select" : kw;
  }

  // ---- running a statement ------------------------------------------------------------------

  // The host's refusal or PostgreSQL's error. code is the SQLSTATE when PostgreSQL raised it
  // (as postgres.js's PostgresError has it), else the ABI's error code.
  function sqlError(r) {
    const e = new Error(r.message);
    const m = /\(SQLSTATE ([0-9A-Z]{5})\)$/.exec(r.message);
    if (m) {
      e.name = "PostgresError";
      e.code = m[1];
      e.severity = "ERROR";
    } else e.code = r.code;
    e.abiCode = r.code;
    return e;
  }
  function call(request) {
    const r = native(JSON.stringify(request));
    if (typeof r !== "string") throw sqlError(r);
    return JSON.parse(r);
  }

  function rowsOf(res, asArrays) {
    const columns = res.columns || [];
    const types = res.types || [];
    const rows = (res.rows || []).map((raw) => {
      if (asArrays) return raw.map((v, i) => decode(types[i], v));
      const o = {};
      for (let i = 0; i < columns.length; i++) o[columns[i]] = decode(types[i], raw[i]);
      return o;
    });
    define(rows, "count", res.row_count);
    define(rows, "command", String(res.command || "").split(" ")[0]);
    define(rows, "columns", columns.map((name, i) => ({ name, type: types[i] })));
    return rows;
  }

  // A statement: lazy, as postgres.js's are (it runs when awaited, or used as a fragment of
  // another statement when written inside one).
  class Query {
    #strings; #args; #unsafe; #unsafeParams; #inTx; #promise; #asArrays = false;
    constructor(strings, args, inTx, unsafe, unsafeParams) {
      this.#strings = strings;
      this.#args = args;
      this.#inTx = inTx;
      this.#unsafe = unsafe;
      this.#unsafeParams = unsafeParams;
    }
    inline(b) {
      if (this.#unsafe !== undefined) {
        if (this.#unsafeParams.length > 0) throw new TypeError("sql.unsafe with parameters cannot be a fragment of another statement");
        b.text += this.#unsafe;
        return;
      }
      b.text += this.#strings[0];
      for (let i = 0; i < this.#args.length; i++) {
        b.value(this.#args[i]);
        b.text += this.#strings[i + 1];
      }
    }
    #request() {
      const b = new Builder();
      if (this.#unsafe !== undefined) {
        b.text = this.#unsafe;
        for (const p of this.#unsafeParams) b.param(p);
      } else this.inline(b);
      const req = { sql: b.text, params: b.params, typed: true };
      if (b.types.some((t) => t !== 0)) req.param_types = b.types;
      // Outside a block, a failed statement rolls back alone and the task's transaction
      // goes on: a handler can catch it, as with postgres.js's autocommitted statements.
      if (!this.#inTx) req.savepoint = true;
      return req;
    }
    execute() {
      if (this.#promise === undefined) {
        try {
          const res = call(this.#request());
          this.#promise = Promise.resolve(rowsOf(res, this.#asArrays));
        } catch (e) {
          this.#promise = Promise.reject(e);
        }
      }
      return this;
    }
    values() { this.#asArrays = true; return this; }
    then(onFulfilled, onRejected) { return this.execute().#promise.then(onFulfilled, onRejected); }
    catch(onRejected) { return this.then(undefined, onRejected); }
    finally(onFinally) { return this.execute().#promise.finally(onFinally); }
    get [Symbol.toStringTag]() { return "Query"; }
  }

  // ---- sql, sql.begin, sql.savepoint -------------------------------------------------------

  const beginOptions = /^\s*(read write|isolation level read committed)?\s*$/i;

  function make(depth) {
    const inTx = depth > 0;
    function sql(first, ...rest) {
      if (Array.isArray(first) && Array.isArray(first.raw)) return new Query(first, rest, inTx);
      if (first === undefined) throw new TypeError("sql() needs a template, an identifier, or the values of a helper");
      return new Helper(first, rest);
    }
    async function block(fn) {
      call({ tx: "begin" });
      let result;
      try {
        result = await fn(make(depth + 1));
        if (Array.isArray(result)) result = await Promise.all(result);
      } catch (e) {
        try { call({ tx: "rollback" }); } catch {}
        throw e;
      }
      call({ tx: "commit" });
      return result;
    }
    // begin([options], fn): a transaction of its own in a step that is not transactional; a
    // savepoint inside the task's transaction in one that is (the task's transaction then
    // commits with its completion).
    sql.begin = (options, fn) => {
      if (typeof options === "function") [fn, options] = [options, ""];
      if (typeof fn !== "function") return Promise.reject(new TypeError("sql.begin takes a function: sql.begin(async sql => { ... })"));
      if (!beginOptions.test(String(options ?? "")))
        return Promise.reject(new TypeError(`sql.begin: the options "${options}" are not available (a task's transaction is read committed, read write)`));
      return block(fn);
    };
    if (inTx) sql.savepoint = (name, fn) => block(typeof name === "function" ? name : fn);
    sql.unsafe = (text, params = []) => new Query(null, null, inTx, String(text), Array.isArray(params) ? params : []);
    sql.json = (value) => new Parameter(value, T.jsonb);
    sql.typed = (value, type) => new Parameter(value, Number(type) || 0);
    sql.array = (value, type) => new Parameter(value, 0, Number(type) || 0);
    sql.end = async () => {};
    sql.close = async () => {};
    sql.types = {};
    sql.options = { parsers: {}, serializers: {} };
    return sql;
  }

  return make(0);
}
