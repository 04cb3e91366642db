// A delivery staged and committed by a process that then dies before any dispatcher ran is delivered once by a
// dispatcher started afterwards, on every database: the row is durable from the application's COMMIT on.
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { useChildScripts } from '../support/child-scripts.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { stagedRowsOf } from '../support/staged-rows.js';
import { startStager } from '../support/stager-child.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

useChildScripts();

for (const dialect of DIALECTS) {
  describe(`a staged delivery outlives the process that staged it (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('committed, then process.exit() before any dispatcher ran: a dispatcher started afterwards delivers it once', async () => {
      const key = uniqueKey('orphan');
      const location = String(db().config.clientUrl ?? db().config.dbName);
      const stager = startStager(dialect, location, ['exit-after-commit', key]);
      expect(await stager.exited).toMatchObject([{ event: 'committed' }]);
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([{ outcome: null, attempts: 0 }]);

      // The stager stamped its row by the system clock: the dispatcher's fake clock stands an hour later.
      const clock = new FakeClock(new Date(Date.now() + 3_600_000));
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
      expect((await drainDueTimers(dispatcher)).inbox).toMatchObject({ claimed: 1, delivered: 1 });
      expect((await drainDueTimers(dispatcher)).inbox.claimed).toBe(0);
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 0, log: 'started;' });
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([{ outcome: 'delivered' }]);
    });
  });
}
