// The `logger` option of the runtime, the dispatcher and the operator API on every database: a wrong logger
// (consoleLogger itself, an object without the four methods) is refused when they are built, naming what is
// missing; the dispatcher and the operator API log through the runtime's logger unless given their own; every line
// is a fixed message with structured fields at the documented level, and no payload value reaches the log.
import { describe, expect, it } from 'vitest';
import { consoleLogger, defineSaga, SagaDispatcher, type SagaLogger, SagaRuntime, silentLogger } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

/** One logged call. */
interface Line {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly message: string;
  readonly fields: Record<string, unknown> | undefined;
}

/** A logger keeping every call. */
function recording(): { lines: Line[]; logger: SagaLogger } {
  const lines: Line[] = [];
  const at = (level: Line['level']) => (message: string, fields?: Record<string, unknown>) => void lines.push({ level, message, fields });
  return { lines, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}

const SECRET = 'payload-secret-4711';

for (const dialect of DIALECTS) {
  describe(`the logger option (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    describe('a wrong logger is refused when built, naming what is missing', () => {
      const wrong: [string, unknown, RegExp][] = [
        [
          'consoleLogger itself (the factory)',
          consoleLogger,
          /'logger' is a function, not a logger: pass a SagaLogger: consoleLogger\('info'\)/,
        ],
        ['an object with info only', { info() {} }, /'logger' has no debug, warn, error methods/],
        ['a console without debug', { info() {}, warn() {}, error() {} }, /'logger' has no debug method:/],
        ['null', null, /'logger' has no debug, info, warn, error methods/],
      ];
      it.each(wrong)('%s: the runtime, the dispatcher and the operator API', (_what, logger, message) => {
        const em = db().orm.em;
        const runtime = new SagaRuntime({ em, sagas: [scriptedSaga], logger: silentLogger });
        const builds = {
          SagaRuntime: () => new SagaRuntime({ em, sagas: [scriptedSaga], logger: logger as SagaLogger }),
          SagaDispatcher: () => new SagaDispatcher({ runtime, logger: logger as SagaLogger }),
          SagaOperations: () => new SagaOperations({ em, sagas: [scriptedSaga], logger: logger as SagaLogger }),
          'SagaOperations on a runtime': () => new SagaOperations({ runtime, logger: logger as SagaLogger }),
        };
        for (const [owner, build] of Object.entries(builds)) {
          expect(build, owner).toThrow(
            expect.objectContaining({ code: 'OPTION_INVALID', message: expect.stringMatching(`^${owner.split(' ')[0]}: `) }),
          );
          expect(build, owner).toThrow(message);
        }
      });

      it('consoleLogger refuses a level that is none of debug, info, warn, error', () => {
        expect(() => consoleLogger('verbose' as never)).toThrow(
          expect.objectContaining({
            code: 'OPTION_INVALID',
            message: "consoleLogger: the level must be one of debug, info, warn, error; got 'verbose'.",
          }),
        );
      });
    });

    it('the dispatcher logs through the runtime’s logger: a failed delivery (warn), its dead letter (error), with fields', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const { lines, logger } = recording();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock, logger });
      const dispatcher = new SagaDispatcher({ runtime, maxAttempts: 2, backoff: { jitter: false } });
      const key = uniqueKey('logged');
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [
          {
            op: 'schedule',
            name: 'poison',
            after: 1_000,
            message: { type: 'Tick', label: SECRET, actions: [{ op: 'throw', message: 'step refused' }] },
          },
        ],
      });
      clock.advance(1_000);
      await dispatcher.runOnce();
      clock.advance(3_600_000);
      await dispatcher.runOnce();

      const row = {
        table: 'saga_timer',
        sagaType: 'scripted',
        sagaId,
        timerName: 'poison',
        messageType: 'Tick',
        error: 'Error: step refused',
      };
      expect(lines.filter((line) => line.level === 'warn' || line.level === 'error')).toEqual([
        {
          level: 'warn',
          message: 'delivery failed; retried after a backoff',
          fields: { ...row, id: expect.any(String), attempt: 1, maxAttempts: 2, retryAt: '2026-01-05T09:00:02.000Z' },
        },
        {
          level: 'error',
          message: 'delivery failed on its last allowed attempt: dead-lettered',
          fields: { ...row, id: expect.any(String), attempt: 2, maxAttempts: 2 },
        },
      ]);
      expect(lines.filter((line) => line.level === 'debug').map((line) => line.message)).toEqual(['dispatcher pass', 'dispatcher pass']);
      expect(lines.find((line) => line.level === 'debug')?.fields).toMatchObject({ timers: { claimed: 1, failed: 1 } });
      expect(JSON.stringify(lines)).not.toContain(SECRET);
    });

    it('start and stop are info; the runtime reports its schema check once (info) and an onHandled that threw (warn)', async () => {
      const { lines, logger } = recording();
      const runtime = new SagaRuntime({
        em: db().orm.em,
        sagas: [scriptedSaga],
        logger,
        onHandled: () => {
          throw new Error('hook failed');
        },
      });
      const key = uniqueKey('hooked');
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      const dispatcher = new SagaDispatcher({ runtime, pollIntervalMs: 60_000, listen: false });
      const idle = new Promise<void>((resolve) => dispatcher.on('idle', resolve));
      dispatcher.start();
      await idle;
      await dispatcher.stop();

      expect(lines.filter((line) => line.level === 'info')).toEqual([
        { level: 'info', message: 'saga schema verified', fields: { sagaTypes: ['scripted'] } },
        {
          level: 'info',
          message: 'dispatcher started',
          fields: {
            pollIntervalMs: 60_000,
            batchSize: expect.any(Number),
            concurrency: 10,
            publishConcurrency: 100,
            publishes: false,
            listen: false,
          },
        },
        { level: 'info', message: 'dispatcher stopped', fields: undefined },
      ]);
      expect(lines.filter((line) => line.level === 'warn')).toEqual([
        {
          level: 'warn',
          message: 'onHandled threw; the unit of work stays committed',
          fields: { sagaType: 'scripted', sagaId, outcome: 'started', error: 'Error: hook failed' },
        },
        {
          level: 'warn',
          message: 'onHandled threw; the unit of work stays committed',
          fields: { sagaType: 'scripted', sagaId, outcome: 'handled', error: 'Error: hook failed' },
        },
      ]);
    });

    it('a concurrency conflict the runtime retries is debug, with the saga and the attempt', async () => {
      const { lines, logger } = recording();
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
      const { sagaId } = await runtime.handle(racing, { type: 'Start', key });
      // The slow step read version 0 and waits; the fast one commits version 1 meanwhile.
      const slow = runtime.handle(racing, { type: 'Slow', key });
      await entered.promise;
      await runtime.handle(racing, { type: 'Fast', key });
      gate.resolve();
      expect(await slow).toMatchObject({ outcome: 'handled', version: 2 });
      expect(lines.filter((line) => line.level === 'debug')).toEqual([
        {
          level: 'debug',
          message: 'concurrency conflict: the step runs again on fresh state',
          fields: { sagaType: 'scripted', sagaId, messageType: 'Slow', attempt: 1, maxAttempts: 10 },
        },
      ]);
    });

    it('the operator API logs each change at info, through the runtime’s logger', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const { lines, logger } = recording();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock, logger });
      const key = uniqueKey('operated');
      const { sagaId } = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key,
        actions: [{ op: 'schedule', name: 'later', after: 60_000 }],
      });
      const ops = new SagaOperations({ runtime });
      const [timer] = (await ops.listTimers({ sagaId: sagaId!, status: 'pending', limit: 10 })).items;
      const missing = crypto.randomUUID();
      await ops.rescheduleTimers([timer!.id, missing], new Date('2026-01-06T09:00:00Z'));
      await ops.forceComplete({ sagaType: 'scripted', sagaId: sagaId!, reason: 'test' });
      expect(lines.filter((line) => line.level === 'info' && line.message === 'operator change')).toEqual([
        {
          level: 'info',
          message: 'operator change',
          fields: { operation: 'rescheduleTimers', requested: 2, affected: 1, failed: 0, ids: [timer!.id] },
        },
        {
          level: 'info',
          message: 'operator change',
          fields: {
            operation: 'forceComplete',
            sagaType: 'scripted',
            sagaId,
            version: 1,
            timersCancelled: 1,
            auditMessageId: expect.any(String),
          },
        },
      ]);
    });
  });
}
