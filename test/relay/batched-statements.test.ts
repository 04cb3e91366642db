// The relay's per-row writes go out together: an idle dispatcher's claim marks started the deliveries it starts
// at once, and the published stamps of the messages published together share one statement
// (docs/performance.md), while each row is still token-checked and published once. (The rows of one saga share
// a lane and go one by one.)
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { useDatabase } from '../support/suite.js';

const ROWS = 20;

for (const dialect of DIALECTS) {
  describe(`relay statements (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it(`a pass relaying ${ROWS} messages with concurrency ${ROWS} marks their starts in its claim and stamps them in one statement`, async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const seeding = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      // One message per saga: the rows of one saga are delivered in order, one after the other.
      for (let n = 0; n < ROWS; n++) {
        await seeding.handle(scriptedSaga, { type: 'Start', key: `relay-${n}`, actions: [{ op: 'send', message: { type: 'Hello', n } }] });
      }
      const statements: string[] = [];
      const orm = await db().openAnother({ debug: ['query'], logger: (line: string) => statements.push(line) });
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
      const published: unknown[] = [];
      const publish = async (message: { payload: unknown }) => void published.push(message.payload);
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, publish, batchSize: ROWS, concurrency: ROWS });

      expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: ROWS, published: ROWS, failed: 0, lost: 0 });
      const outboxUpdates = (column: string) =>
        statements.filter((s) => /update .saga_outbox. set/.test(s) && new RegExp(`set .${column}. =`).test(s));
      // Two statements write saga_outbox: the claim (which marks the starts) and the stamps.
      expect(statements.filter((s) => /update .saga_outbox. set/.test(s))).toHaveLength(2);
      expect(outboxUpdates('token')).toHaveLength(1);
      expect(outboxUpdates('delivery_started_at')).toHaveLength(0);
      expect(outboxUpdates('dispatched_at')).toHaveLength(1);
      expect(published).toHaveLength(ROWS);
      const rows = await rowsOf(db().orm).outbox();
      expect(rows).toHaveLength(ROWS);
      for (const row of rows) expect(row).toMatchObject({ outcome: 'published', attempts: 0, lockedUntil: null });
    });
  });
}
