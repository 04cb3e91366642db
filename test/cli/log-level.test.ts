// The CLI's --log-level on every database: the operator API's log lines go to stderr at the level asked (info: what a
// change changed, as structured fields), stdout keeps the command's output, and a level that is none of debug,
// info, warn, error is a usage error before anything is opened.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { cliApp } from '../support/cli-process.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`the CLI's --log-level (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const app = cliApp(db);
    let timerId: string;

    beforeAll(async () => {
      await app.create();
      const runtime = new SagaRuntime({
        em: db().orm.em,
        sagas: [scriptedSaga],
        clock: new FakeClock('2026-11-30T09:00:00Z'),
        logger: silentLogger,
      });
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: 'logged',
        actions: [{ op: 'schedule', name: 'later', after: { days: 1 } }],
      });
      timerId = (await rowsOf(db().orm).pendingTimers(sagaId!))[0]!.id;
    });
    afterAll(() => app.remove());

    it('--log-level info: the change is logged on stderr with its fields; stdout has only the table', async () => {
      const run = await app.cliInProcess('timers', 'reschedule', timerId, '--due', '+2h', '--yes', '--log-level', 'info');
      expect(run.code, run.stderr).toBe(0);
      const logged = run.stderr.split('\n').filter((line) => line.startsWith('[mikro-orm-saga] '));
      expect(logged).toEqual([
        `[mikro-orm-saga] info: operator change {"operation":"rescheduleTimers","requested":1,"affected":1,"failed":0,"ids":["${timerId}"]}`,
      ]);
      expect(run.stdout).not.toContain('[mikro-orm-saga]');
      expect(run.stdout).toContain('rescheduled');
    });

    it('by default (warn) a change that went well logs nothing', async () => {
      const run = await app.cliInProcess('timers', 'reschedule', timerId, '--due', '+3h', '--yes');
      expect(run.code, run.stderr).toBe(0);
      expect(run.stderr).not.toContain('[mikro-orm-saga]');
    });

    it('a level that is no level is a usage error (exit 2) naming the levels', async () => {
      const run = await app.cliInProcess('timers', 'list', '--log-level', 'verbose');
      expect(run).toMatchObject({ code: 2, stdout: '' });
      expect(run.stderr).toBe('mikro-orm-saga timers list: --log-level takes one of debug, info, warn, error.\n');
    });
  });
}
