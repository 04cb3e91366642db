// A pending timer name written by another unit of work between our replace and our insert is a race (PostgreSQL):
// retried on fresh state. (The deterministic side, a unique business column, is in
// unit-of-work/persistence-failures.test.ts on both databases.)
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

describe('unique violations that are races (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);

  it('another writer commits a pending timer of the same name between our replace and our insert: retried, then replaced', async () => {
    const clock = new FakeClock();
    const key = uniqueKey('timer-race');
    const other = new pg.Client({ connectionString: db().config.clientUrl });
    await other.connect();
    let commitOther: (() => void) | undefined;
    const orm = await db().openAnother({
      onQuery: (sql: string) => {
        // Our INSERT is about to go out: let the other writer commit its row now, so the insert collides with it.
        if (commitOther && /^insert into "saga_timer"/.test(sql)) {
          commitOther();
          commitOther = undefined;
        }
        return sql;
      },
    });
    try {
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key });
      await other.query('begin');
      await other.query(
        `insert into saga_timer (id, saga_type, saga_id, name, step, due_at, available_at, message_type, payload, token, attempts, created_at)
         values ($1, 'scripted', $2, 'reminder', null, $3, $3, 'Tick', '{"type":"Tick"}', $4, 0, $3)`,
        [randomUUID(), sagaId, new Date(0), randomUUID()],
      );
      const committed = new Promise<void>((resolve, reject) => {
        commitOther = () => void other.query('commit').then(() => resolve(), reject);
      });
      const result = await runtime.handle(scriptedSaga, {
        type: 'Do',
        key,
        actions: [{ op: 'schedule', name: 'reminder', after: 5_000, scope: 'saga' }],
      });
      await committed;
      expect(result).toMatchObject({ outcome: 'handled', conflicts: 1, attempts: 2, timersScheduled: 1 });
      const pending = await rowsOf(db().orm).pendingTimers(sagaId!);
      expect(pending).toHaveLength(1);
      expect(pending[0]?.dueAt).toEqual(new Date(clock.now().getTime() + 5_000));
    } finally {
      await other.end();
    }
  });
});
