package poller

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-wasm/pgflow-wasm/internal/kit"
	"github.com/pgflow-wasm/pgflow-wasm/schema"
)

// Wake is a level-triggered doorbell: any number of Rings before a wait count as one.
type Wake chan struct{}

// NewWake returns a Wake.
func NewWake() Wake { return make(Wake, 1) }

// Ring wakes the waiter, never blocking.
func (w Wake) Ring() {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Listener holds one connection that LISTENs on each flow's queue-insert channel and rings
// that flow's Wake on every notification. After a (re)connect it rings every Wake, since
// messages may have arrived while it was away. Connection loss is retried with backoff.
type Listener struct {
	config   *pgx.ConnConfig
	channels map[string]Wake // channel -> doorbell
	own      *OwnNotices     // notifications not to ring for; nil: none
	log      *slog.Logger

	mu        sync.Mutex
	connected bool
}

// NewListener returns a Listener for the given channel -> Wake map.
func NewListener(config *pgx.ConnConfig, channels map[string]Wake, log *slog.Logger) *Listener {
	return &Listener{config: config, channels: channels, log: log}
}

// SkipOwn makes the listener drop the notifications own expects (call it before Run).
func (l *Listener) SkipOwn(own *OwnNotices) { l.own = own }

// Connected reports whether the listening connection is up.
func (l *Listener) Connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.connected
}

func (l *Listener) setConnected(v bool) {
	l.mu.Lock()
	l.connected = v
	l.mu.Unlock()
}

// Run listens until ctx is done.
func (l *Listener) Run(ctx context.Context) {
	retry := kit.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, &retry)
		l.setConnected(false)
		if ctx.Err() != nil {
			return
		}
		wait := retry.Next()
		l.log.Warn("notify listener disconnected; reconnecting", "error", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

func (l *Listener) listenOnce(ctx context.Context, retry *kit.Backoff) error {
	conn, err := pgx.ConnectConfig(ctx, l.config)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for ch := range l.channels {
		if _, err := conn.Exec(ctx, "listen "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	l.setConnected(true)
	retry.Reset()
	for _, w := range l.channels {
		w.Ring()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if l.own != nil && l.own.take(n.PID, n.Channel) {
			continue
		}
		if w, ok := l.channels[n.Channel]; ok {
			w.Ring()
		}
	}
}

// nativeNotifyTriggers are the names pgmq.enable_notify_insert gives its trigger: the
// pgflow-wasm layer's and the real pgmq's (1.8 and later).
var nativeNotifyTriggers = []string{"pgmq_notify_insert", "trigger_notify_queue_insert_listeners"}

// EnableInsertNotify makes inserts into a queue NOTIFY on schema.InsertChannel(queue) and says how.
// pgmq 1.8 and the pgflow-wasm layer have pgmq.enable_notify_insert. An older real pgmq
// (1.5 to 1.7) has not: a statement-level trigger of our own on the queue table does the same
// (one NOTIFY per inserting statement). It lives in schema pgflow_wasm, goes away with the
// queue or with `drop schema pgflow_wasm cascade`, and is dropped again as soon as pgmq itself
// can notify (after ALTER EXTENSION pgmq UPDATE), so a queue never notifies twice. A queue
// that already notifies is left as it is: turning it on takes the queue table's owner.
func EnableInsertNotify(ctx context.Context, pool *pgxpool.Pool, queue string) (how string, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Workers starting together would race on CREATE OR REPLACE.
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('pgflow-wasm:notify-insert'))`); err != nil {
			return err
		}
		var native, nativeOn, ownOn bool
		var table *string
		if err := tx.QueryRow(ctx, `select to_regproc('pgmq.enable_notify_insert') is not null,
			to_regclass(format('pgmq.%I', $1::text))::text,
			exists (select 1 from pg_trigger where tgrelid = to_regclass(format('pgmq.%I', $1::text)) and tgname = any($2)),
			exists (select 1 from pg_trigger where tgrelid = to_regclass(format('pgmq.%I', $1::text)) and tgname = 'pgflow_wasm_notify_insert')`,
			schema.QueueTableName(queue), nativeNotifyTriggers).Scan(&native, &table, &nativeOn, &ownOn); err != nil {
			return err
		}
		if table == nil {
			return fmt.Errorf("queue %s has no table pgmq.%s", queue, schema.QueueTableName(queue))
		}
		// Already on (the queue's owner turned it on, e.g. `pgflow-wasm compile`): nothing to
		// change, so a worker login that does not own the queue table listens all the same.
		if native && nativeOn && !ownOn || !native && ownOn {
			how = "already on"
			return nil
		}
		if native {
			how = "pgmq.enable_notify_insert"
			if _, err := tx.Exec(ctx, `select pgmq.enable_notify_insert($1)`, queue); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `drop trigger if exists pgflow_wasm_notify_insert on `+*table)
			return err
		}
		how = "a pgflow-wasm trigger (this pgmq has no enable_notify_insert)"
		_, err := tx.Exec(ctx, `
			create schema if not exists pgflow_wasm;
			create or replace function pgflow_wasm.notify_queue_insert() returns trigger language plpgsql as $$
			begin
			  perform pg_notify('pgmq.' || TG_TABLE_NAME || '.INSERT', '');
			  return null;
			end $$;
			comment on function pgflow_wasm.notify_queue_insert() is
			  'pgflow-wasm: NOTIFY pgmq.<queue table>.INSERT once per inserting statement, for pgmq versions without enable_notify_insert';
			create or replace trigger pgflow_wasm_notify_insert after insert on `+*table+`
			  for each statement execute function pgflow_wasm.notify_queue_insert()`)
		return err
	})
	return how, err
}
