// The CLI's `inbox` commands on every database: `inbox list` shows staged deliveries with their saga key, status and
// why one failed, filtered by saga key and status, as a table and as --json; `inbox requeue` puts a dead-lettered one
// back; `outbox list` shows a message the application staged itself with the saga type (app).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { cliApp } from '../support/cli-process.js';
import { DIALECTS } from '../support/databases.js';
import { useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`the CLI's inbox commands on ${dialect}`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const app = cliApp(db);
    const cli = app.cliInProcess;
    const json = async (...args: string[]) => JSON.parse((await cli(...args, '--json')).stdout);
    let failing = '';
    let appMessage = '';

    /** Saga `held` got a delivery that throws (dead-lettered after two attempts) and one staged after it. */
    beforeAll(async () => {
      await app.create();
      const clock = new FakeClock('2026-11-30T09:00:00Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key: 'held' });
          failing = runtime.stageDelivery(em, scriptedSaga, {
            type: 'Do',
            key: 'held',
            actions: [{ op: 'throw', message: 'card declined' }],
          }).id;
          runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key: 'held', actions: [{ op: 'inc' }] });
          appMessage = runtime.stageMessage(em, { type: 'ArticleWritten' }).id;
        });
      const backoff = { baseMs: 1_000, maxMs: 1_000, jitter: false };
      const dispatcher = new SagaDispatcher({ runtime, publish: async () => undefined, maxAttempts: 2, backoff, logger: silentLogger });
      await drainDueTimers(dispatcher);
      clock.advance(1_000);
      await drainDueTimers(dispatcher);
    });
    afterAll(() => app.remove());

    it('inbox list shows the saga key, the status and why a delivery was dead-lettered; --json has the rows', async () => {
      const table = (await cli('inbox', 'list', '--saga-key', 'held')).stdout;
      expect(table.split('\n')[0]).toMatch(/^ID\s+STATUS\s+SAGA TYPE\s+SAGA KEY\s+MESSAGE\s+DUE\s+ATTEMPTS\s+ERROR$/);
      const line = table
        .split('\n')
        .find((l) => l.startsWith(failing))!
        .split(/ {2,}/);
      expect(line.slice(1, 5)).toEqual(['dead_lettered', 'scripted', 'held', 'Do']);
      expect(line[7]).toContain('card declined');
      const page = await json('inbox', 'list', '--saga-key', 'held');
      expect(page.items.map((row: { status: string }) => row.status)).toEqual(['delivered', 'dead_lettered', 'delivered']);
      expect((await json('inbox', 'list', '--status', 'dead_lettered')).items).toMatchObject([{ id: failing, sagaKey: 'held' }]);
    });

    it('inbox requeue puts a dead-lettered delivery back in the pending set', async () => {
      const run = await cli('inbox', 'requeue', failing, '--yes');
      expect(run.code).toBe(0);
      expect(run.stdout).toContain('1 of 1 changed');
      expect((await json('inbox', 'list', '--status', 'pending')).items).toMatchObject([
        { id: failing, attempts: 0, lastError: expect.stringContaining('card declined') },
      ]);
    });

    it("outbox list shows the application's own message with the saga type (app)", async () => {
      const table = (await cli('outbox', 'list', '--message-type', 'ArticleWritten')).stdout;
      const line = table
        .split('\n')
        .find((l) => l.startsWith(appMessage))!
        .split(/ {2,}/);
      expect(line.slice(1, 4)).toEqual(['published', '(app)', appMessage]);
    });
  });
}
