#!/usr/bin/env node
// The reference worker of `pgflow-wasm-bench`: pgflow's own TypeScript flow loop (the edge
// worker of pgflow 0.8.x, rebuilt for Node on @pgflow/core's PgflowSqlClient), with a
// handler that does the same work as the WASM benchmark handlers. README.md in this folder
// says which upstream files it follows and where it departs from them.
//
// Protocol for the harness: one line `ready <worker_id>` on stdout once registered, errors
// on stderr, SIGTERM/SIGINT stops polling and lets the current batch finish, then one line
// `done <tasks_completed> <tasks_failed>` on stdout and exit 0.

import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { PgflowSqlClient } from '@pgflow/core';

// What the worker writes into pgflow.workers.function_name.
const FUNCTION_NAME = 'reference-ts';
// The edge worker's lifecycle sends a heartbeat at most this often (checked between batches).
const HEARTBEAT_INTERVAL_MS = 5000;
// A failed poll is retried after this pause instead of in a hot loop of error lines.
const POLL_ERROR_PAUSE_MS = 1000;
// pgflow's slug rule; flow slugs also name pgmq tables.
const SLUG = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

const USAGE = `usage: node internal/bench/reference/worker.mjs --database-url URL --flow SLUG [options]

  --database-url URL       PostgreSQL URL (postgres://user@host:port/db) with pgflow installed
  --flow SLUG              the flow whose queue this worker serves
  --batch-size N           messages per read_with_poll (default 10)
  --vt N                   visibility timeout of read messages, seconds (default 2)
  --max-poll-seconds N     how long one read_with_poll waits for messages (default 5)
  --poll-interval-ms N     read_with_poll's re-check interval inside the database (default 200)
  --max-concurrent N       handlers running at once (default 10)
  --max-connections N      connection pool size (default 4, the edge worker's maxPgConnections)
  --fail-steps A,B         handlers of these steps throw (to exercise fail_task)
  --handler-ms N           each handler waits N ms before returning (default 0; a slow step)
  --help                   this text`;

const INT_OPTIONS = {
  'batch-size': { default: 10, min: 1 },
  vt: { default: 2, min: 1 },
  'max-poll-seconds': { default: 5, min: 1 },
  'poll-interval-ms': { default: 200, min: 1 },
  'max-concurrent': { default: 10, min: 1 },
  'max-connections': { default: 4, min: 1 },
  'handler-ms': { default: 0, min: 0 },
};

class UsageError extends Error {}

// parseOptions turns argv into a validated options object or throws a UsageError that
// names the bad option.
function parseOptions(argv) {
  const spec = {
    'database-url': { type: 'string' },
    flow: { type: 'string' },
    'fail-steps': { type: 'string' },
    help: { type: 'boolean' },
  };
  for (const name of Object.keys(INT_OPTIONS)) spec[name] = { type: 'string' };
  let values;
  try {
    ({ values } = parseArgs({ args: argv, options: spec, strict: true, allowPositionals: false }));
  } catch (err) {
    throw new UsageError(err.message);
  }
  if (values.help) return { help: true };

  const opts = {};
  const url = values['database-url'];
  if (!url) throw new UsageError('--database-url is required');
  let parsed;
  try {
    parsed = new URL(url);
  } catch {
    throw new UsageError(`--database-url ${JSON.stringify(url)} is not a URL (want postgres://user@host:port/db)`);
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new UsageError(`--database-url must start with postgres:// or postgresql://, got ${parsed.protocol}//`);
  }
  opts.databaseUrl = url;

  const flow = values.flow;
  if (!flow) throw new UsageError('--flow is required');
  if (!SLUG.test(flow) || flow.length > 128) {
    throw new UsageError(`--flow ${JSON.stringify(flow)} is not a pgflow slug (letters, digits and _, not starting with a digit, at most 128 characters)`);
  }
  opts.flow = flow;

  for (const [name, { default: def, min }] of Object.entries(INT_OPTIONS)) {
    const raw = values[name];
    let n = def;
    if (raw !== undefined) {
      if (!/^\d+$/.test(raw)) throw new UsageError(`--${name} wants a whole number, got ${JSON.stringify(raw)}`);
      n = Number(raw);
      if (!Number.isSafeInteger(n) || n < min) throw new UsageError(`--${name} must be at least ${min}, got ${raw}`);
    }
    opts[camel(name)] = n;
  }

  opts.failSteps = new Set();
  if (values['fail-steps'] !== undefined) {
    for (const slug of values['fail-steps'].split(',')) {
      if (!SLUG.test(slug)) throw new UsageError(`--fail-steps: ${JSON.stringify(slug)} is not a step slug`);
      opts.failSteps.add(slug);
    }
  }
  return opts;
}

function camel(name) {
  return name.replace(/-([a-z])/g, (_, c) => c.toUpperCase());
}

// where names a database URL's server and database, without credentials, for messages.
function where(url) {
  const u = new URL(url);
  return `${u.hostname}:${u.port || 5432}${u.pathname}`;
}

function logError(msg) {
  process.stderr.write(`reference-ts: ${msg}\n`);
}

function describe(err) {
  return err instanceof Error ? err.message : String(err);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// limiter runs at most max functions at once, like the edge worker's promise queue.
function limiter(max) {
  let active = 0;
  const waiting = [];
  return async function run(fn) {
    if (active < max) active++;
    else await new Promise((resolve) => waiting.push(resolve)); // the finishing run hands its slot over
    try {
      return await fn();
    } finally {
      const next = waiting.shift();
      if (next) next();
      else active--;
    }
  };
}

// makeHandler is the step handler: the same work as the WASM benchmark handlers (return a
// small JSON object), after --handler-ms of waiting, or a throw for the steps named by
// --fail-steps.
function makeHandler(failSteps, handlerMs) {
  return async (input, task) => {
    if (handlerMs > 0) await sleep(handlerMs);
    if (failSteps.has(task.step_slug)) throw new Error(`reference handler told to fail step ${task.step_slug}`);
    return { ok: true };
  };
}

class ReferenceWorker {
  constructor(opts, sql) {
    this.opts = opts;
    this.sql = sql;
    this.client = new PgflowSqlClient(sql);
    this.workerId = randomUUID();
    this.handler = makeHandler(opts.failSteps, opts.handlerMs);
    this.run = limiter(opts.maxConcurrent);
    this.stopping = false;
    this.lastHeartbeat = 0;
    this.completed = 0;
    this.failed = 0;
  }

  // start checks the flow exists (so a wrong slug is one clear error, not a poll error per
  // second) and registers the worker: start_tasks refuses unregistered worker ids.
  async start() {
    const [row] = await this.sql`select exists (select 1 from pgflow.flows where flow_slug = ${this.opts.flow}) as found`;
    if (!row.found) {
      throw new Error(`flow ${JSON.stringify(this.opts.flow)} is not in pgflow.flows of this database (create it with pgflow.create_flow first)`);
    }
    await this.sql`
      insert into pgflow.workers (worker_id, queue_name, function_name)
      values (${this.workerId}::uuid, ${this.opts.flow}, ${FUNCTION_NAME})`;
  }

  stop() {
    this.stopping = true;
  }

  // loop is the edge worker's main loop: heartbeat (throttled), then one batch, until stopped.
  async loop() {
    while (!this.stopping) {
      await this.heartbeat();
      if (this.stopping) break;
      await this.processBatch();
    }
  }

  async heartbeat() {
    const now = Date.now();
    if (now - this.lastHeartbeat < HEARTBEAT_INTERVAL_MS) return;
    try {
      const [row] = await this.sql`
        update pgflow.workers set last_heartbeat_at = clock_timestamp()
        where worker_id = ${this.workerId}::uuid
        returning deprecated_at is not null as is_deprecated`;
      this.lastHeartbeat = now;
      if (row?.is_deprecated) {
        logError('worker marked deprecated in pgflow.workers: taking no more work');
        this.stop();
      }
    } catch (err) {
      // As upstream: a failed heartbeat does not stop processing.
      logError(`heartbeat: ${describe(err)}`);
    }
  }

  // processBatch reads and starts a batch, runs its handlers (at most --max-concurrent at
  // once) and returns when every task of the batch is completed or failed.
  async processBatch() {
    const tasks = await this.poll();
    if (tasks.length === 0) return;
    await Promise.all(tasks.map((task) => this.run(() => this.execute(task))));
  }

  // poll is the edge worker's two-phase poll: read_with_poll, then start_tasks.
  async poll() {
    const o = this.opts;
    try {
      const messages = await this.client.readMessages(o.flow, o.vt, o.batchSize, o.maxPollSeconds, o.pollIntervalMs);
      // Read but not started: the messages come back after their visibility timeout.
      if (messages.length === 0 || this.stopping) return [];
      return await this.client.startTasks(o.flow, messages.map((m) => m.msg_id), this.workerId);
    } catch (err) {
      logError(`poll: ${describe(err)}`);
      await sleep(POLL_ERROR_PAUSE_MS);
      return [];
    }
  }

  // execute runs one task's handler and reports the outcome. As upstream, any error (from
  // the handler or from complete_task itself) ends in fail_task.
  async execute(task) {
    try {
      const output = await this.handler(task.input, task);
      await this.client.completeTask(task, output);
      this.completed++;
    } catch (err) {
      try {
        await this.client.failTask(task, err);
        this.failed++;
      } catch (failErr) {
        logError(`fail_task for run ${task.run_id} step ${task.step_slug}[${task.task_index}]: ${describe(failErr)} (after: ${describe(err)})`);
      }
    }
  }
}

async function main() {
  let opts;
  try {
    opts = parseOptions(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    logError(err.message);
    process.stderr.write(`${USAGE}\n`);
    return 2;
  }
  if (opts.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }

  const sql = postgres(opts.databaseUrl, {
    max: opts.maxConnections,
    prepare: false, // as the edge worker (it runs behind poolers)
    onnotice: (n) => logError(`notice: ${n.message}`), // stdout belongs to the harness protocol
  });
  const worker = new ReferenceWorker(opts, sql);

  const onSignal = (name) => {
    if (worker.stopping) {
      logError(`${name} again: exiting without waiting for the batch`);
      process.exit(1);
    }
    worker.stop();
  };
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  process.on('SIGINT', () => onSignal('SIGINT'));

  try {
    await worker.start();
  } catch (err) {
    logError(`starting against ${where(opts.databaseUrl)}: ${describe(err)}`);
    await sql.end({ timeout: 1 }).catch(() => {});
    return 1;
  }
  process.stdout.write(`ready ${worker.workerId}\n`);

  await worker.loop();
  await sql.end({ timeout: 10 });
  process.stdout.write(`done ${worker.completed} ${worker.failed}\n`);
  return 0;
}

process.exitCode = await main();
