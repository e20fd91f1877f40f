package schema

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

//go:embed sql/stepcomplete.sql
var stepCompleteSQL string

// StepCompleteFunc is the function a transactional SQL step's session completes its task
// with (sql/stepcomplete.sql): SECURITY DEFINER, open to every role, refusing any call
// without the task's proof.
const StepCompleteFunc = "pgflow_wasm_step.complete_task"

// EnsureStepCompletion creates StepCompleteFunc and its key when missing (install replaces
// them whatever their state) and returns the key, which the worker makes proofs with. A
// role that may not create them, on a database where they are missing, gets an error that
// says what to run.
func EnsureStepCompletion(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, replace bool) ([]byte, error) {
	var key []byte
	err := createRaced(func() (err error) {
		key, err = ensureStepCompletion(ctx, db, replace)
		return err
	})
	return key, err
}

func ensureStepCompletion(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, replace bool) ([]byte, error) {
	var key []byte
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `select to_regprocedure($1) is not null and to_regclass('pgflow_wasm.step_proof_key') is not null`,
			StepCompleteFunc+"(uuid,text,integer,integer,jsonb,text)").Scan(&exists); err != nil {
			return err
		}
		if !exists || replace {
			if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock($1)`, LockKeyStepCompletion); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, stepCompleteSQL); err != nil {
				return fmt.Errorf("creating %s (transactional SQL steps complete their tasks through it; "+
					"run `pgflow-wasm db install` once as the owner of schema pgflow_wasm): %w", StepCompleteFunc, err)
			}
		}
		err := tx.QueryRow(ctx, `select key from pgflow_wasm.step_proof_key`).Scan(&key)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgflow_wasm.step_proof_key is empty: run `pgflow-wasm db install` to make its key")
		}
		if err != nil {
			return fmt.Errorf("reading pgflow_wasm.step_proof_key (the worker's login needs SELECT on it: docs/database.md): %w", err)
		}
		return nil
	})
	return key, err
}

// StepProof is the proof StepCompleteFunc wants for one attempt of one task: the same keyed
// hash the function computes, sha256(key || sha256(key || "run/step/index/attempt")).
func StepProof(key []byte, runID, stepSlug string, taskIndex, attempt int) string {
	msg := runID + "/" + stepSlug + "/" + strconv.Itoa(taskIndex) + "/" + strconv.Itoa(attempt)
	inner := sha256.Sum256(append(append([]byte{}, key...), msg...))
	outer := sha256.Sum256(append(append([]byte{}, key...), inner[:]...))
	return hex.EncodeToString(outer[:])
}
