// handle(..., { em }) refuses what it cannot join, and hostile input, with typed errors before anything is written, on
// every database: an EntityManager in no open transaction, one whose transaction has ended, something that is not
// an EntityManager, one of another MikroORM instance, a second call joined to a transaction while the first runs
// (through its EntityManager or a nested transaction's, on the same connection), and every bad message handle()
// refuses outside a transaction, refused the same way inside one.
import type { EntityManager } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { type HandleOptions, SagaRuntime, type SagaValidationError } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ArticleSchema, committedArticle, writeArticle } from '../../fixtures/article.js';
import { type Action, type ScriptedMessage, ScriptedSaga, scriptedSaga, scriptedVariant } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { rowsOf } from '../../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

/** What handle() threw, or a marker when it returned. */
const thrown = (promise: Promise<unknown>) =>
  promise.then(
    () => ({ code: 'none (it returned)' }) as unknown as SagaValidationError,
    (error: unknown) => error as SagaValidationError,
  );

/** Hostile messages for an existing saga of `key`, each with the code handle() refuses it with. */
function hostile(key: string): [string, ScriptedMessage | Record<string, unknown>, HandleOptions, string][] {
  const step = (actions: Action[]): ScriptedMessage => ({ type: 'Do', key, actions });
  return [
    ['an object as correlation value', { type: 'Do', key: { $ne: 'x' }, actions: [] }, {}, 'CORRELATION_INVALID'],
    ['a message type the saga has no step for', { type: 'Nope', key }, {}, 'MESSAGE_TYPE_UNKNOWN'],
    ['an over-long message id', step([{ op: 'inc' }]), { messageId: 'x'.repeat(201) }, 'MESSAGE_ID_INVALID'],
    ['a BigInt in a sent message', step([{ op: 'inc' }, { op: 'send', message: { type: 'Sent', n: 1n } }]), {}, 'PAYLOAD_NOT_SERIALIZABLE'],
    ['a negative timer delay', step([{ op: 'inc' }, { op: 'schedule', name: 't', after: -1 }]), {}, 'TIMER_DELAY_INVALID'],
    ['U+0000 in a state value', step([{ op: 'note', text: 'a\u0000b' }]), {}, 'STATE_VALUE_INVALID'],
  ];
}

for (const dialect of DIALECTS) {
  describe(`handle(..., { em }) refuses before anything is written (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, ArticleSchema]);
    const setup = () => ({
      runtime: new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() }),
      rows: rowsOf(db().orm),
    });

    it('an EntityManager in no open transaction: TRANSACTION_REQUIRED, nothing read or written', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('plain');
      const before = await rows.counts();
      const error = await thrown(
        runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] }, { em: db().orm.em.fork() }),
      );
      expect(error).toMatchObject({ name: 'SagaValidationError', code: 'TRANSACTION_REQUIRED', details: { sagaType: 'scripted' } });
      expect(error.message).toMatch(/em\.transactional\(\) hands its callback/);
      expect(await rows.counts()).toEqual(before);
    });

    it('an EntityManager whose transaction has ended: TRANSACTION_REQUIRED, nothing read or written', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('ended');
      let kept: EntityManager | undefined;
      await db().orm.em.transactional(async (em) => {
        kept = em;
      });
      const before = await rows.counts();
      const error = await thrown(runtime.handle(scriptedSaga, { type: 'Start', key }, { em: kept }));
      expect(error).toMatchObject({ code: 'TRANSACTION_REQUIRED' });
      expect(await rows.counts()).toEqual(before);
    });

    it('something other than an EntityManager, or one of another MikroORM instance: OPTION_INVALID, nothing read or written', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('not-em');
      const before = await rows.counts();
      for (const em of [null, {}, 'orm.em', db().orm]) {
        const error = await thrown(runtime.handle(scriptedSaga, { type: 'Start', key }, { em: em as never }));
        expect(error).toMatchObject({ code: 'OPTION_INVALID' });
        expect(error.message).toMatch(/'em' option of handle\(\)/);
      }
      const other = await db().openAnother();
      const otherEm = other.em.fork();
      await otherEm.begin();
      try {
        const error = await thrown(runtime.route({ type: 'Start', key }, { em: otherEm }));
        expect(error).toMatchObject({ code: 'OPTION_INVALID' });
        expect(error.message).toMatch(/another MikroORM instance/);
      } finally {
        await otherEm.rollback();
      }
      expect(await rows.counts()).toEqual(before);
    });

    it('a second call joined to a transaction while the first one runs: OPTION_INVALID for the second; the first commits', async () => {
      const key = uniqueKey('twice');
      const entered = deferred();
      const go = deferred();
      const held = scriptedVariant('Hold', async (saga) => {
        saga.counter += 1;
        entered.resolve();
        await go.promise;
      });
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [held] });
      const em = db().orm.em.fork();
      await em.begin();
      const first = runtime.handle(held, { type: 'Hold', key }, { em });
      await entered.promise;
      const second = await thrown(runtime.handle(held, { type: 'Hold', key }, { em }));
      go.resolve();
      expect(await first).toMatchObject({ outcome: 'started' });
      expect(second).toMatchObject({ code: 'OPTION_INVALID' });
      expect(second.message).toMatch(/Await each handle\(\) or route\(\) call before the next in one transaction/);
      // The transaction takes the next call once the first settled.
      expect(await runtime.handle(held, { type: 'Hold', key }, { em })).toMatchObject({ outcome: 'handled', version: 1 });
      await em.commit();
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 2, version: 1 });
    });

    it("a second call through a nested transaction's EntityManager while the first runs: OPTION_INVALID; the first's rollback takes nothing of it", async () => {
      const entered = deferred();
      const go = deferred();
      const failing = scriptedVariant('Fail', async (saga) => {
        saga.counter += 1;
        entered.resolve();
        await go.promise;
        throw new Error('the first unit failed');
      });
      const counting = scriptedVariant('Count', async (saga) => {
        saga.counter += 100;
      });
      const first = new SagaRuntime({ em: db().orm.em, sagas: [failing] });
      const second = new SagaRuntime({ em: db().orm.em, sagas: [counting] });
      const failedKey = uniqueKey('outer');
      const key = uniqueKey('nested');
      await db().orm.em.transactional(async (em) => {
        const failed = thrown(first.handle(failing, { type: 'Fail', key: failedKey }, { em }));
        await entered.promise;
        // The nested transaction is a savepoint on the same connection: a unit joined there would interleave its
        // statements with the first one's, and the first one's rollback to its savepoint would undo them.
        const refused = await em.transactional((nested: EntityManager) =>
          thrown(second.handle(counting, { type: 'Count', key }, { em: nested })),
        );
        expect(refused).toMatchObject({ code: 'OPTION_INVALID' });
        expect(refused.message).toMatch(/Await each handle\(\) or route\(\) call before the next in one transaction/);
        go.resolve();
        expect(await failed).toMatchObject({ message: 'the first unit failed' });
        // Once the first settled, a nested transaction takes the call.
        await em.transactional((nested: EntityManager) => second.handle(counting, { type: 'Count', key }, { em: nested }));
      });
      const rows = rowsOf(db().orm);
      expect(await rows.saga(failedKey)).toBeNull();
      expect(await rows.saga(key)).toMatchObject({ counter: 100, version: 0 });
    });

    it('hostile input: the same typed error handle() gives outside a transaction; nothing of it written, the transaction goes on', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('hostile');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const cases = hostile(key);
      const outside = [];
      for (const [, message, options] of cases) outside.push((await thrown(runtime.handle(scriptedSaga, message as never, options))).code);
      expect(outside).toEqual(cases.map(([, , , code]) => code));
      const before = await rows.counts();
      await db().orm.em.transactional(async (em) => {
        for (const [what, message, options, code] of cases) {
          const error = await thrown(runtime.handle(scriptedSaga, message as never, { ...options, em }));
          expect(error.code, what).toBe(code);
        }
        // Refused or rolled back to its savepoint, each left the transaction able to go on.
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { em });
        writeArticle(em, key);
      });
      expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
      expect(await rows.counts()).toEqual(before);
      expect(await rows.saga(key)).toMatchObject({ counter: 1, version: 1, log: 'started;' });
    });
  });
}
