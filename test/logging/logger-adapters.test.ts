// The documented logger adapters, for real on every database: pinoLogger writes the library's lines as pino JSON
// (fields as properties, the message as `msg`) to a stream the test captures; mikroOrmLogger writes them through the
// ORM's own DefaultLogger, to the writer the ORM was configured with, whatever its debug setting.
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { mikroOrmLogger, pinoLogger, SagaDispatcher, SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { failingTimer, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** A pino logger at `debug` writing its JSON lines to `lines`. */
function capturedPino() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  return { lines, pino: pino({ level: 'debug', base: undefined, timestamp: false }, stream) };
}

/** Without the colours MikroORM's DefaultLogger may add. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: ANSI colour codes are what is removed.
const plain = (line: string) => line.replace(/\x1b\[[0-9;]*m/g, '');

describe('logger adapters refuse what is no logger when they are made', () => {
  it.each([
    [
      'pino itself (the factory)',
      () => pinoLogger(pino as never),
      /^pinoLogger: the logger given is a function without debug, info, warn, error: pass a pino logger, such as pinoLogger\(pino\(\)\)/,
    ],
    ['undefined', () => pinoLogger(undefined as never), /^pinoLogger: the logger given is undefined without debug, info, warn, error/],
    [
      'a logger without debug',
      () => pinoLogger({ info() {}, warn() {}, error() {} } as never),
      /^pinoLogger: the logger given is an object without debug:/,
    ],
    [
      'orm.config.getLogger itself',
      () => mikroOrmLogger((() => undefined) as never),
      /^mikroOrmLogger: the logger given is a function without log, warn, error: pass MikroORM's logger, such as mikroOrmLogger\(orm\.config\.getLogger\(\)\)/,
    ],
  ])('%s: OPTION_INVALID, naming what to pass', (_what, make, message) => {
    expect(make).toThrow(expect.objectContaining({ code: 'OPTION_INVALID', message: expect.stringMatching(message) }));
  });

  it('a logger that is a function carrying the methods is taken', () => {
    const lines: unknown[][] = [];
    const log = Object.assign(() => undefined, {
      debug: (...args: unknown[]) => void lines.push(['debug', ...args]),
      info: (...args: unknown[]) => void lines.push(['info', ...args]),
      warn: (...args: unknown[]) => void lines.push(['warn', ...args]),
      error: (...args: unknown[]) => void lines.push(['error', ...args]),
    });
    pinoLogger(log).warn('w', { n: 1 });
    expect(lines).toEqual([['warn', { n: 1 }, 'w']]);
  });
});

for (const dialect of DIALECTS) {
  describe(`logger adapters (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('pinoLogger: a failed delivery is a pino warn line with the fields as properties', async () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const captured = capturedPino();
      const runtime = new SagaRuntime({
        em: db().orm.em,
        sagas: [scriptedSaga],
        clock,
        logger: pinoLogger(captured.pino.child({ component: 'sagas' })),
      });
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('pino'), actions: [failingTimer('poison')] });
      clock.advance(1_000);
      await new SagaDispatcher({ runtime, backoff: { jitter: false } }).runOnce();
      expect(captured.lines.find((line) => line.level === 40)).toEqual({
        level: 40,
        component: 'sagas',
        msg: 'delivery failed; retried after a backoff',
        table: 'saga_timer',
        id: expect.any(String),
        sagaType: 'scripted',
        sagaId,
        timerName: 'poison',
        messageType: 'Tick',
        attempt: 1,
        maxAttempts: 10,
        retryAt: '2026-01-05T09:00:02.000Z',
        error: 'Error: boom',
      });
      // Info and debug lines reach pino too; pino's own level filters them.
      expect(captured.lines.map((line) => [line.level, line.msg])).toContainEqual([30, 'saga schema verified']);
      expect(captured.lines.map((line) => [line.level, line.msg])).toContainEqual([20, 'dispatcher pass']);
    });

    it('mikroOrmLogger: lines at its level and above go through the ORM’s DefaultLogger to its writer, fields as JSON', async () => {
      const written: string[] = [];
      // The ORM's query log is off (debug: false): the library's lines are written all the same.
      const orm = await db().openAnother({ debug: false, logger: (line: string) => void written.push(plain(line)) });
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const logger = mikroOrmLogger(orm.config.getLogger(), { level: 'info' });
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock, logger });
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('orm'), actions: [failingTimer('poison')] });
      clock.advance(1_000);
      await new SagaDispatcher({ runtime, backoff: { jitter: false } }).runOnce();

      expect(written).toContain('[mikro-orm-saga] saga schema verified {"sagaTypes":["scripted"]}');
      const warning = written.find((line) => line.startsWith('[mikro-orm-saga] delivery failed; retried after a backoff '));
      expect(JSON.parse(warning!.slice(warning!.indexOf('{')))).toMatchObject({
        sagaId,
        timerName: 'poison',
        attempt: 1,
        error: 'Error: boom',
      });
      // Below its level (debug): dropped.
      expect(written.filter((line) => line.includes('dispatcher pass'))).toEqual([]);
    });

    it('mikroOrmLogger: a namespace of one’s own, and MikroORM’s warn and error for those levels', () => {
      const calls: [string, string, string, Record<string, unknown> | undefined][] = [];
      const record = (kind: string) => (namespace: string, message: string, context?: Record<string, unknown>) =>
        void calls.push([kind, namespace, message, context]);
      const logger = mikroOrmLogger(
        { log: record('log'), warn: record('warn'), error: record('error') },
        { level: 'debug', namespace: 'sagas' },
      );
      logger.debug('a', { n: 1 });
      logger.info('b');
      logger.warn('c', { n: 2n });
      logger.error('d', { n: 3 });
      expect(calls).toEqual([
        ['log', 'sagas', 'a {"n":1}', { enabled: true, fields: { n: 1 } }],
        ['log', 'sagas', 'b', { enabled: true }],
        ['warn', 'sagas', 'c {"n":"(a bigint)"}', { enabled: true, fields: { n: 2n } }],
        ['error', 'sagas', 'd {"n":3}', { enabled: true, fields: { n: 3 } }],
      ]);
    });
  });
}
