-- pgtest's exactly-once audit: every change of a pgflow task's status, with the attempt and
-- worker it happened under and the output stored. Installed into every test database (not
-- into Empty ones); read by audit.go when the test ends.
create schema if not exists pgtest_audit;

create table if not exists pgtest_audit.transitions (
  id bigserial primary key,
  flow_slug text not null,
  run_id uuid not null,
  step_slug text not null,
  task_index int not null,
  old_status text not null,
  new_status text not null,
  attempts_count int not null,
  last_worker_id uuid,
  output jsonb,
  at timestamptz not null default clock_timestamp()
);

create or replace function pgtest_audit.record() returns trigger language plpgsql as $$
begin
  insert into pgtest_audit.transitions (flow_slug, run_id, step_slug, task_index, old_status, new_status,
                                        attempts_count, last_worker_id, output)
  values (new.flow_slug, new.run_id, new.step_slug, new.task_index, old.status, new.status,
          new.attempts_count, new.last_worker_id, new.output);
  return null;
end $$;

drop trigger if exists pgtest_audit on pgflow.step_tasks;
create trigger pgtest_audit after update of status on pgflow.step_tasks
  for each row when (old.status is distinct from new.status) execute function pgtest_audit.record();
