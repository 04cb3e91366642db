// What the CLI prints of stored text. Terminal controls in a handler's error, a correlation value or a timer name are
// shown escaped in every table, never sent to the terminal; --json keeps the values exact (JSON-escaped). A requeue
// the database refuses for one row prints the per-item table and exits 1. The commands run in this process through
// runCli, whose output is all the binary writes (test/cli/cli.test.ts runs the binary).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { advanceAndDrain, FakeClock } from '../../src/testing/index.js';
import { failingTimer, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { cliApp } from '../support/cli-process.js';
import { DIALECTS } from '../support/databases.js';
import { refuseInserts, rowsOf } from '../support/rows.js';
import { useDatabase } from '../support/suite.js';

/** Sets the window title, rings the bell and turns the text red, on a terminal that is sent it raw. */
const EVIL = '\x1b]0;X\x07\x1b[31m';
const SHOWN = '\\x1b]0;X\\x07\\x1b[31m';
const KEY = `order-${EVIL}`;
const TIMER = `timeout-${EVIL}`;
const ERROR = `boom ${EVIL}`;
/** Any C0 control but newline, or a C1 control: none may reach the terminal. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what must not be printed.
const CONTROL = /[\x00-\x09\x0b-\x1f\x7f-\x9f]/;

for (const dialect of DIALECTS) {
  describe(`the CLI on stored text (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const app = cliApp(db);
    const rows = () => rowsOf(db().orm);

    beforeAll(async () => {
      await app.create();
      const clock = new FakeClock('2026-11-30T09:00:00Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: KEY,
        actions: [failingTimer(TIMER, { error: ERROR, after: { minutes: 1 } })],
      });
      await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: 'halfway',
        actions: [failingTimer('kept', { after: { minutes: 1 } }), failingTimer('refused', { after: { minutes: 1 } })],
      });
      const dispatcher = new SagaDispatcher({ runtime, publish: async () => {}, maxAttempts: 2, logger: silentLogger });
      await advanceAndDrain(clock, dispatcher, { minutes: 2 });
      await advanceAndDrain(clock, dispatcher, { minutes: 10 });
    });
    afterAll(() => app.remove());

    it('shows terminal controls in errors, correlation values and timer names escaped; --json keeps them exact', async () => {
      const saga = (await rows().saga(KEY))!;
      const runs = {
        timers: await app.cliInProcess('timers', 'list', '--saga-id', saga.id),
        sagas: await app.cliInProcess('sagas', 'list', '--correlation', KEY, '--type', 'scripted'),
        show: await app.cliInProcess('sagas', 'show', 'scripted', saga.id),
      };
      for (const [name, run] of Object.entries(runs)) {
        expect(run.code, `${name}: ${run.stderr}`).toBe(0);
        expect(CONTROL.test(run.stdout), name).toBe(false);
        expect(CONTROL.test(run.stderr), name).toBe(false);
      }
      expect(runs.timers.stdout).toContain(`timeout-${SHOWN}`);
      expect(runs.timers.stdout).toContain(`boom ${SHOWN}`);
      expect(runs.sagas.stdout).toContain(`order-${SHOWN}`);
      expect(runs.show.stdout).toContain(`timeout-${SHOWN}`);

      const json = await app.cliInProcess('timers', 'list', '--saga-id', saga.id, '--json');
      expect(CONTROL.test(json.stdout)).toBe(false);
      const [timer] = JSON.parse(json.stdout).items;
      expect(timer).toMatchObject({ name: TIMER, status: 'dead_lettered', lastError: expect.stringContaining(ERROR) });
    });

    it('a requeue the database refuses for one row prints each row with its result and the error class, and exits 1', async () => {
      const saga = (await rows().saga('halfway'))!;
      const dead = await rows().timers({ sagaId: saga.id });
      const [kept, refused] = ['kept', 'refused'].map((name) => dead.find((t) => t.name === name)!.id);
      const allow = await refuseInserts(db().orm, 'saga_timer', 'name', 'refused');
      const run = await app.cliInProcess('timers', 'requeue', kept!, refused!, '--yes').finally(allow);
      expect(run.code, run.stderr).toBe(1);
      const lines = run.stdout.trim().split('\n');
      expect(lines[0]).toMatch(/^ID\s+RESULT\s+ERROR$/);
      expect(lines[1]).toMatch(new RegExp(`^${kept}\\s+requeued\\s+-$`));
      expect(lines[2]).toMatch(new RegExp(`^${refused}\\s+failed\\s+[A-Z]\\w*Exception$`));
      expect(lines[3]).toBe('1 of 2 changed');
      expect(run.stdout).not.toContain('write refused');
      expect((await rows().timers({ sagaId: saga.id })).map((t) => [t.name, t.outcome]).sort()).toEqual([
        ['kept', null],
        ['refused', 'dead_lettered'],
      ]);
    });
  });
}
