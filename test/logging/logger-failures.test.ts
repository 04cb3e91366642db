// A logger that fails on every database: a logger whose methods throw, or return a promise that rejects, loses its
// lines and nothing else. A unit of work commits and answers as it would have (a conflict is retried, a hook that
// threw is still reported as committed), the dispatcher retries, dead-letters and fires its rows, and its loop
// starts, goes idle and stops. A logger written as a class, its methods on the prototype, is accepted and called
// with itself as `this`.
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaDispatcher, type SagaLogger, SagaRuntime } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { failingTimer, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

/** A logger whose every method throws, counting its calls. */
function throwing(): { calls: string[]; logger: SagaLogger } {
  const calls: string[] = [];
  const fail = (level: string) => (message: string) => {
    calls.push(`${level}: ${message}`);
    throw new Error(`logger ${level} failed`);
  };
  return { calls, logger: { debug: fail('debug'), info: fail('info'), warn: fail('warn'), error: fail('error') } };
}

/** A logger whose every method returns a promise that rejects (an async sink that is down). */
function rejecting(): { calls: string[]; logger: SagaLogger } {
  const calls: string[] = [];
  const fail = (level: string) => async (message: string) => {
    calls.push(`${level}: ${message}`);
    throw new Error(`logger ${level} failed`);
  };
  return { calls, logger: { debug: fail('debug'), info: fail('info'), warn: fail('warn'), error: fail('error') } };
}

/** A logger written as a class: its methods live on the prototype and read `this`. */
class PrefixLogger implements SagaLogger {
  readonly lines: string[] = [];
  constructor(private readonly prefix: string) {}
  debug(message: string): void {
    this.lines.push(`${this.prefix} debug ${message}`);
  }
  info(message: string): void {
    this.lines.push(`${this.prefix} info ${message}`);
  }
  warn(message: string): void {
    this.lines.push(`${this.prefix} warn ${message}`);
  }
  error(message: string): void {
    this.lines.push(`${this.prefix} error ${message}`);
  }
}

/** Unhandled promise rejections while a test runs. */
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown) => void unhandled.push(reason);

for (const dialect of DIALECTS) {
  describe(`a logger that fails (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    beforeEach(() => {
      unhandled.length = 0;
      process.on('unhandledRejection', onUnhandled);
    });
    afterEach(() => {
      process.off('unhandledRejection', onUnhandled);
    });

    it.each([
      ['throws', throwing],
      ['rejects', rejecting],
    ])('a unit of work whose logger %s commits and answers as usual, its hook’s failure included', async (_how, make) => {
      const { calls, logger } = make();
      const runtime = new SagaRuntime({
        em: db().orm.em,
        sagas: [scriptedSaga],
        logger,
        onHandled: () => {
          throw new Error('hook failed');
        },
      });
      const key = uniqueKey('hooked');
      const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
      const handled = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(started).toMatchObject({ outcome: 'started', version: 0 });
      expect(handled).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
      // The logger was called (and failed) for the hook of each unit of work.
      expect(calls.filter((call) => call.startsWith('warn: onHandled threw'))).toHaveLength(2);
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    });

    it('a concurrency conflict is retried when the logger throws on its debug line', async () => {
      const { calls, logger } = throwing();
      const gate = deferred();
      const entered = deferred();
      type Message = { type: 'Start'; key: string } | { type: 'Slow'; key: string } | { type: 'Fast'; key: string };
      let slowRuns = 0;
      const racing = defineSaga<ScriptedSaga, Message>({
        name: 'scripted',
        state: ScriptedSaga,
        correlation: { property: 'key', from: (m) => m.key },
        startedBy: ['Start'],
        steps: {
          Start() {},
          async Slow(saga) {
            slowRuns++;
            if (slowRuns === 1) {
              entered.resolve();
              await gate.promise;
            }
            saga.counter += 10;
          },
          Fast(saga) {
            saga.counter += 1;
          },
        },
      });
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [racing], logger, groupCommit: false });
      const key = uniqueKey('conflict');
      await runtime.handle(racing, { type: 'Start', key });
      const slow = runtime.handle(racing, { type: 'Slow', key });
      await entered.promise;
      await runtime.handle(racing, { type: 'Fast', key });
      gate.resolve();
      expect(await slow).toMatchObject({ outcome: 'handled', version: 2 });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 11, version: 2 });
      expect(calls).toContain('debug: concurrency conflict: the step runs again on fresh state');
    });

    it.each([
      ['throws', throwing],
      ['rejects', rejecting],
    ])('the dispatcher whose logger %s retries, dead-letters and fires as usual', async (_how, make) => {
      const { calls, logger } = make();
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock, logger });
      const dispatcher = new SagaDispatcher({ runtime, maxAttempts: 2, backoff: { jitter: false } });
      const key = uniqueKey('dispatched');
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [failingTimer('poison'), { op: 'schedule', name: 'healthy', after: 1_000 }],
      });
      const rows = rowsOf(db().orm);

      clock.advance(1_000);
      await dispatcher.runOnce();
      expect(await rows.timers({ sagaId })).toMatchObject([
        { name: 'healthy', outcome: 'fired' },
        { name: 'poison', outcome: null, attempts: 1 },
      ]);
      clock.advance(3_600_000);
      await dispatcher.runOnce();
      expect(await rows.timers({ sagaId, name: 'poison' })).toMatchObject([{ outcome: 'dead_lettered', attempts: 2 }]);
      expect(calls).toContain('warn: delivery failed; retried after a backoff');
      expect(calls).toContain('error: delivery failed on its last allowed attempt: dead-lettered');
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    });

    it('the dispatcher loop starts, goes idle and stops when its logger throws', async () => {
      const { calls, logger } = throwing();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], logger });
      const dispatcher = new SagaDispatcher({ runtime, pollIntervalMs: 60_000, listen: false });
      const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
      dispatcher.start();
      await idle;
      await dispatcher.stop();
      expect(dispatcher.running).toBe(false);
      expect(calls).toEqual(expect.arrayContaining(['info: dispatcher started', 'info: dispatcher stopped']));
    });

    it('an operator change is made and answered when the logger throws', async () => {
      const { calls, logger } = throwing();
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const key = uniqueKey('operated');
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [{ op: 'schedule', name: 'later', after: 60_000 }],
      });
      const ops = new SagaOperations({ runtime, logger });
      const [timer] = (await ops.listTimers({ sagaId: sagaId!, status: 'pending', limit: 10 })).items;
      const result = await ops.rescheduleTimers([timer!.id], new Date('2026-01-06T09:00:00Z'));
      expect(result).toMatchObject({ requested: 1, affected: 1 });
      expect(await rowsOf(db().orm).timers({ sagaId })).toMatchObject([{ dueAt: new Date('2026-01-06T09:00:00Z') }]);
      expect(calls).toContain('info: operator change');
    });

    it('a logger written as a class is accepted and called with itself as this', async () => {
      const logger = new PrefixLogger('[app]');
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock, logger });
      await runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('classy'), actions: [failingTimer('poison')] });
      clock.advance(1_000);
      await new SagaDispatcher({ runtime, backoff: { jitter: false }, listen: false }).runOnce();
      expect(logger.lines).toEqual(
        expect.arrayContaining([
          '[app] info saga schema verified',
          '[app] warn delivery failed; retried after a backoff',
          '[app] debug dispatcher pass',
        ]),
      );
    });
  });
}
