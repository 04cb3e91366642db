// MikroORM's query log shows what a unit of work sent, no more: a BEGIN, lock bound or COMMIT sent in one string with
// a unit's statement (PostgreSQL) is logged; a BEGIN the unit never sent (it ended before its first statement, or
// its statement went alone on SQLite) is not; nor is a BEGIN for a group opened by SAVEPOINT. Each test compares the
// log with the statements the driver was handed.
import type { MikroORM, Options } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { ORM_MAJOR } from '../../src/orm/orm-major.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS, isSqlite, type TestDatabase } from '../support/databases.js';
import { statementsSent } from '../support/pg-statements.js';
import { rowsOf } from '../support/rows.js';
import { kinds, recordStatements } from '../support/sqlite-statements.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** An ORM of its own whose query log lands, lowercased and without colours, in `logged`; closed after the test. */
function loggingOrm(db: () => TestDatabase) {
  const cleanups: (() => unknown)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  return {
    cleanups,
    async open(overrides: Partial<Options> = {}) {
      const logged: string[] = [];
      const orm = await db().openAnother({
        debug: ['query'],
        // biome-ignore lint/suspicious/noControlCharactersInRegex: MikroORM colours its log lines
        logger: (line: string) => void logged.push(line.replace(/\x1b\[[0-9;]*m/g, '').toLowerCase()),
        ...overrides,
      });
      cleanups.push(() => orm.close(true));
      return { orm, logged };
    },
  };
}

/** An afterTransactionStart subscriber on `orm` that throws while armed. */
function throwingAtStart(orm: MikroORM): { armed: boolean } {
  const subscriber = { armed: false, afterTransactionStart: async () => {} };
  subscriber.afterTransactionStart = async () => {
    if (subscriber.armed) throw new Error('refused at start');
  };
  orm.em.getEventManager().registerSubscriber(subscriber as never);
  return subscriber;
}

const count = (lines: readonly string[], pattern: RegExp) => lines.filter((line) => pattern.test(line)).length;

describe("MikroORM's query log against what was sent (postgresql)", () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const logging = loggingOrm(db);

  for (const [name, actions] of [
    ['a message that changes nothing (completed saga)', [{ op: 'inc' }]],
    ['a one-UPDATE message', [{ op: 'note', text: 'x' }]],
  ] as const) {
    // The COMMIT sent in the string of a unit's only statement (`begin; select set_config(...); update ...; commit`)
    // is logged too, not only BEGIN, the bound and the UPDATE.
    it(`${name}: the log claims no BEGIN, lock bound or COMMIT that was not sent`, async () => {
      const { orm, logged } = await logging.open();
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('log');
      await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'complete' }] });
      logged.length = 0;
      const sent = await statementsSent(() => runtime.handle(scriptedSaga, { type: 'Do', key, actions }));
      const sentText = sent.join('\n').toLowerCase();
      const inSent = (pattern: RegExp) => (sentText.match(new RegExp(pattern.source, 'g')) ?? []).length;
      expect({
        begin: count(logged, /\bbegin\b/),
        bound: count(logged, /set_config/),
        commit: count(logged, /\bcommit\b/),
      }).toEqual({ begin: inSent(/\bbegin\b/), bound: inSent(/set_config/), commit: inSent(/\bcommit\b/) });
    });
  }

  // BEGIN goes with the unit's first statement, so it is logged when sent, not when the connection is taken.
  it('an afterTransactionStart subscriber throws: the log claims no BEGIN (nor ROLLBACK) that was not sent', async () => {
    const { orm, logged } = await logging.open();
    const subscriber = throwingAtStart(orm);
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], concurrency: { maxAttempts: 1 } });
    const key = uniqueKey('start-throws');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    logged.length = 0;
    subscriber.armed = true;
    const sent = await statementsSent(() =>
      runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).catch(() => undefined),
    );
    const sentText = sent.join('\n').toLowerCase();
    expect({
      begin: count(logged, /\bbegin\b/),
      bound: count(logged, /set_config/),
    }).toEqual({ begin: (sentText.match(/\bbegin\b/g) ?? []).length, bound: (sentText.match(/set_config/g) ?? []).length });
  });
});

for (const dialect of DIALECTS.filter(isSqlite)) {
  describe.runIf(ORM_MAJOR === 6)(`MikroORM's query log against what was sent (${dialect}, MikroORM 6)`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const logging = loggingOrm(db);
    const record = (orm: MikroORM) => {
      const recorder = recordStatements(orm);
      logging.cleanups.push(recorder.stop);
      return recorder.sent;
    };
    const claimed = (logged: readonly string[], word: string) => count(logged, new RegExp(`\\b${word}\\b`));
    const sentCount = (sent: readonly string[], word: string) => kinds(sent).filter((k) => k === word).length;

    it('the log does not claim BEGIN or COMMIT for a lone UPDATE, nor BEGIN for a group opened by SAVEPOINT', async () => {
      const { orm, logged } = await logging.open();
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('log');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const sent = record(orm);
      logged.length = 0;
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      const claims = () => ({ begin: claimed(logged, 'begin'), commit: claimed(logged, 'commit') });
      const sends = () => ({ begin: sentCount(sent, 'begin'), commit: sentCount(sent, 'commit') });
      expect(claims()).toEqual(sends());
      // A group.
      const keys = Array.from({ length: 8 }, (_, i) => uniqueKey(`log-${i}`));
      for (const k of keys) await runtime.handle(scriptedSaga, { type: 'Start', key: k });
      sent.length = 0;
      logged.length = 0;
      await Promise.all(keys.map((k) => runtime.handle(scriptedSaga, { type: 'Do', key: k, actions: [{ op: 'inc' }] })));
      expect(claims()).toEqual(sends());
    });

    it('an afterTransactionStart subscriber throws: the log claims no BEGIN that was not sent, and nothing stays open', async () => {
      const { orm, logged } = await logging.open();
      const subscriber = throwingAtStart(orm);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], concurrency: { maxAttempts: 1 } });
      const key = uniqueKey('start-throws');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const sent = record(orm);
      logged.length = 0;
      subscriber.armed = true;
      await expect(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })).rejects.toThrow();
      subscriber.armed = false;
      expect({ begin: claimed(logged, 'begin'), rollback: claimed(logged, 'rollback') }).toEqual({
        begin: sentCount(sent, 'begin'),
        rollback: sentCount(sent, 'rollback'),
      });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      const { orm: reader } = await logging.open();
      expect((await rowsOf(reader).saga(key))?.counter).toBe(1);
    });
  });
}
