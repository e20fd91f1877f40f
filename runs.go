package pgflowwasm

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/pgflow-wasm/pgflow-wasm/pgflowtype"

	"github.com/jackc/pgx/v5"

	"github.com/pgflow-wasm/pgflow-wasm/internal/store"
)

// StartRun starts a run of flow with input and returns its id. input is a
// json.RawMessage or []byte holding JSON, or any value encoding/json encodes.
func (c *Client) StartRun(ctx context.Context, flow string, input any) (string, error) {
	raw, err := inputJSON(input)
	if err != nil {
		return "", err
	}
	return store.Start(ctx, c.pool, flow, raw)
}

// StartRunTx starts a run inside the caller's transaction: the run exists, and its first
// tasks are queued, only once tx commits (rows your code wrote in tx and the run that
// processes them commit together, or neither does).
func (c *Client) StartRunTx(ctx context.Context, tx pgx.Tx, flow string, input any) (string, error) {
	raw, err := inputJSON(input)
	if err != nil {
		return "", err
	}
	return store.Start(ctx, tx, flow, raw)
}

// WaitRun waits until a run completes or fails (or ctx ends) and returns it.
func (c *Client) WaitRun(ctx context.Context, runID string) (*pgflowtype.Run, error) {
	st, err := c.store(ctx)
	if err != nil {
		return nil, err
	}
	return st.Wait(ctx, runID, waitRecheck)
}

// GetRun reads a run as it is now.
func (c *Client) GetRun(ctx context.Context, runID string) (*pgflowtype.Run, error) {
	st, err := c.store(ctx)
	if err != nil {
		return nil, err
	}
	return st.Get(ctx, runID)
}

// store is the read model over the client's database, opened at its first use (it reads
// which pgflow the database has).
func (c *Client) store(ctx context.Context) (*store.Store, error) {
	c.readsMu.Lock()
	defer c.readsMu.Unlock()
	if c.reads == nil {
		st, err := store.Open(ctx, c.pool)
		if err != nil {
			return nil, err
		}
		c.reads = st.WithStaleAfter(c.cfg.WorkerStaleAfter)
	}
	return c.reads, nil
}

func inputJSON(input any) (json.RawMessage, error) {
	switch v := input.(type) {
	case json.RawMessage:
		return v, nil
	case []byte:
		return json.RawMessage(v), nil
	}
	b, err := json.Marshal(input)
	if err != nil {
		return nil, fmt.Errorf("pgflowwasm: the run input cannot be encoded as JSON: %w", err)
	}
	return b, nil
}
