// What the CLI's timer, outbox, saga and purge commands print, as a table and as --json, on every database: the
// DUE column after a requeue, the ERROR column of a published row, `sagas show` without repeated saga columns,
// `--due` from now, `purge` with nothing to do, and a requeue refused because the saga would discard the timer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { advanceAndDrain, FakeClock } from '../../src/testing/index.js';
import { type Action, failingTimer, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { cliApp } from '../support/cli-process.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { useDatabase } from '../support/suite.js';

const UUID = '[0-9a-f-]{36}';
/** The table's line of the row `id`, split on its column gaps. */
function lineOf(table: string, id: string): string[] {
  const line = table.split('\n').find((l) => l.startsWith(id));
  if (!line) throw new Error(`no line for ${id} in:\n${table}`);
  return line.split(/ {2,}/);
}

for (const dialect of DIALECTS) {
  describe(`the CLI's row commands on ${dialect}`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const app = cliApp(db);
    const cli = app.cliInProcess;
    const json = async (...args: string[]) => {
      const run = await cli(...args, '--json');
      return { ...run, data: JSON.parse(run.stdout) };
    };
    const ids: Record<string, string> = {};

    /**
     * `stuck` and `closed` each have a dead-lettered timer (`closed` was then force-completed); `waiting` has a
     * timer pending for a day; `flaky`'s message was refused once by the broker, then published.
     */
    beforeAll(async () => {
      await app.create();
      const clock = new FakeClock('2026-11-30T09:00:00Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const start = async (key: string, actions: Action[]) => {
        ids[key] = (await runtime.handle(scriptedSaga, { type: 'Start', key, actions })).sagaId!;
      };
      await start('stuck', [failingTimer('payment-timeout', { error: 'card declined', after: { minutes: 1 } })]);
      await start('closed', [failingTimer('payment-timeout', { error: 'card declined', after: { minutes: 1 } })]);
      await start('waiting', [{ op: 'schedule', name: 'reminder', after: { days: 1 } }]);
      await start('flaky', [{ op: 'send', message: { type: 'ShipOrder' } }]);
      let refusals = 0;
      const publish = async () => {
        if (refusals++ === 0) throw new Error('broker unavailable');
      };
      const backoff = { baseMs: 1_000, maxMs: 1_000, jitter: false };
      const dispatcher = new SagaDispatcher({ runtime, publish, maxAttempts: 2, backoff, logger: silentLogger });
      await advanceAndDrain(clock, dispatcher, { minutes: 1 });
      await advanceAndDrain(clock, dispatcher, { minutes: 1 });
      const ops = new SagaOperations({ runtime });
      await ops.forceComplete({ sagaType: 'scripted', sagaId: ids.closed!, reason: 'order cancelled' });
    });
    afterAll(() => app.remove());

    const deadTimerOf = async (key: string) => {
      const { data } = await json('timers', 'list', '--saga-id', ids[key]!, '--status', 'dead_lettered');
      return data.items[0] as { id: string; dueAt: string };
    };

    it('after a requeue, DUE shows when the timer is next tried, as availableAt in --json', async () => {
      const dead = await deadTimerOf('stuck');
      expect((await cli('timers', 'requeue', dead.id, '--yes')).code).toBe(0);
      const { data } = await json('timers', 'list', '--saga-id', ids.stuck!);
      const [timer] = data.items;
      expect(timer).toMatchObject({ id: dead.id, status: 'pending', dueAt: dead.dueAt });
      expect(timer.availableAt).not.toBe(dead.dueAt);
      const table = (await cli('timers', 'list', '--saga-id', ids.stuck!)).stdout;
      expect(table.split('\n')[0]).toMatch(/^ID\s+STATUS\s+SAGA TYPE\s+SAGA ID\s+NAME\s+MESSAGE\s+DUE\s+ATTEMPTS\s+ERROR$/);
      const [, status, , , , , due, attempts, error] = lineOf(table, dead.id);
      expect([status, due, attempts]).toEqual(['pending', timer.availableAt, '0']);
      // A requeued timer keeps its last error: why it had been dead-lettered.
      expect(error).toBe('Error: card declined');
    });

    it('a published outbox row shows no ERROR, while --json keeps its lastError', async () => {
      const { data } = await json('outbox', 'list', '--saga-id', ids.flaky!);
      const [row] = data.items;
      expect(row).toMatchObject({
        status: 'published',
        messageType: 'ShipOrder',
        lastError: expect.stringContaining('broker unavailable'),
      });
      const table = (await cli('outbox', 'list', '--saga-id', ids.flaky!)).stdout;
      expect(lineOf(table, row.id).at(-1)).toBe('-');
    });

    it('sagas show lists its timers and outbox rows without repeating the saga type and id', async () => {
      const shown = await cli('sagas', 'show', 'scripted', ids.closed!);
      expect(shown.code, shown.stderr).toBe(0);
      const tables = shown.stdout.split('\n').filter((line) => line.startsWith('ID '));
      expect(tables).toEqual([
        expect.stringMatching(/^ID\s+STATUS\s+NAME\s+MESSAGE\s+DUE\s+ATTEMPTS\s+ERROR$/),
        expect.stringMatching(/^ID\s+STATUS\s+NAME\s+MESSAGE\s+DUE\s+ATTEMPTS\s+ERROR$/),
        expect.stringMatching(/^ID\s+STATUS\s+MESSAGE\s+CREATED\s+ATTEMPTS\s+ERROR$/),
      ]);
      expect(shown.stdout).not.toMatch(new RegExp(`${UUID}\\s+dead_lettered\\s+scripted`));
      const { data } = await json('sagas', 'show', 'scripted', ids.closed!);
      expect(data.recentTimers[0]).toMatchObject({ sagaType: 'scripted', sagaId: ids.closed, status: 'dead_lettered' });
    });

    it('reschedule --due takes a time from now (+2h, "in 2h") or now; a bare age is a usage error', async () => {
      const [timer] = (await json('timers', 'list', '--saga-id', ids.waiting!, '--status', 'pending')).data.items;
      const dueOf = async () => Date.parse((await json('timers', 'list', '--saga-id', ids.waiting!)).data.items[0].dueAt);
      for (const [due, ahead] of [
        ['+2h', 7_200_000],
        ['in 90m', 5_400_000],
        ['now', 0],
      ] as const) {
        const before = Date.now();
        const moved = await json('timers', 'reschedule', timer.id, '--due', due, '--yes');
        const after = Date.now();
        expect(moved.data.items, due).toEqual([{ id: timer.id, status: 'rescheduled' }]);
        const at = await dueOf();
        expect(at, due).toBeGreaterThanOrEqual(before + ahead);
        expect(at, due).toBeLessThanOrEqual(after + ahead);
      }
      const table = await cli('timers', 'reschedule', timer.id, '--due', 'in 1d', '--yes');
      expect(table).toMatchObject({ code: 0, stdout: expect.stringMatching(new RegExp(`^${timer.id}\\s+rescheduled$`, 'm')) });
      const bare = await json('timers', 'reschedule', timer.id, '--due', '2h', '--yes');
      expect(bare).toMatchObject({ code: 2, stderr: expect.stringContaining('+2h') });
      expect(bare.data.error).toMatchObject({ code: 'USAGE', message: expect.stringContaining('"in 2h"') });
    });

    it('purge with nothing to do names the CLI flags, exit 2, before asking or connecting', async () => {
      for (const args of [
        ['purge', '--yes'],
        ['purge', '--include-dead-lettered', '--yes'],
      ]) {
        const run = await json(...args);
        expect(run.code).toBe(2);
        expect(run.data.error.message).toContain('--dispatched-before, --completed-sagas-before, --expired-message-ids');
        expect(run.stderr).not.toMatch(/dispatchedBefore|completedSagasBefore|expiredMessageIds/);
      }
      const noTerminal = await cli('purge');
      expect(noTerminal).toMatchObject({ code: 2, stderr: expect.stringContaining('--dispatched-before') });
    });

    it('refuses to requeue a timer of a completed saga that would discard it: saga_completed, exit 1, left dead-lettered', async () => {
      const dead = await deadTimerOf('closed');
      const table = await cli('timers', 'requeue', dead.id, '--yes');
      expect(table.code).toBe(1);
      expect(table.stdout).toMatch(new RegExp(`^${dead.id}\\s+saga_completed\\n0 of 1 changed$`, 'm'));
      const run = await json('timers', 'requeue', dead.id, '--yes');
      expect(run.code).toBe(1);
      expect(run.data).toEqual({ requested: 1, affected: 0, items: [{ id: dead.id, status: 'saga_completed' }] });
      expect((await rowsOf(db().orm).timers({ id: dead.id }))[0]).toMatchObject({ outcome: 'dead_lettered' });
    });
  });
}
