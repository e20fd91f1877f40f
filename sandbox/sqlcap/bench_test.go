package sqlcap

import "testing"

// benchStatement is a typical handler statement: a CTE that writes, a join, parameters,
// a function call and a string constant.
const benchStatement = `with moved as (
  update app.ledger set amount = amount + $2, note = 'moved by step'
   where run_id = $1 and task_index = any($3::int[])
  returning run_id, task_index, amount)
select m.run_id, m.task_index, m.amount, coalesce(a.name, 'unknown') as name, now() as at
  from moved m left join app.accounts a on a.id = m.task_index
 order by m.task_index limit 100`

func BenchmarkCheck(b *testing.B) {
	if err := Check(benchStatement); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		Check(benchStatement)
	}
}
