// Idempotent handling by message id on every database: a message id is recorded with its unit of work, and the same
// id again writes nothing and answers `duplicate` with the version it produced.
import { describe, expect, it } from 'vitest';
import { SagaRuntime, SagaSchemaError, SagaValidationError } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Action, ScriptedSaga, scriptedSaga, scriptedVariant } from '../fixtures/scripted-saga.js';
import { createTestDatabase, DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

const incAndSend: Action[] = [{ op: 'inc' }, { op: 'send', message: { type: 'Counted' } }];

for (const dialect of DIALECTS) {
  describe(`idempotent handling by message id (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const setup = (options: Partial<ConstructorParameters<typeof SagaRuntime>[0]> = {}) => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock, ...options });
      return { clock, runtime, rows: rowsOf(db().orm) };
    };

    it('the same message id twice has one effect; the second answers duplicate with the version the first produced', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('twice');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const message = { type: 'Do', key, actions: incAndSend } as const;
      const first = await runtime.handle(scriptedSaga, message, { messageId: `${key}-m1` });
      const second = await runtime.handle(scriptedSaga, message, { messageId: `${key}-m1` });
      expect(first).toMatchObject({ outcome: 'handled', version: 1, changed: true, messagesSent: 1 });
      expect(second).toMatchObject({ outcome: 'duplicate', sagaId: first.sagaId, version: 1, changed: false, messagesSent: 0 });
      const saga = await rows.saga(key);
      expect(saga).toMatchObject({ counter: 1, version: 1 });
      expect(await rows.outbox(saga!.id)).toHaveLength(1);
      expect(await rows.handledMessages(saga!.id)).toMatchObject([{ messageId: `${key}-m1`, version: 1, sagaType: 'scripted' }]);
      expect(runtime.stats().duplicates).toBe(1);
    });

    it('a redelivered start message finds the instance it created and writes nothing', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('start');
      const message = { type: 'Start', key, actions: incAndSend } as const;
      const first = await runtime.handle(scriptedSaga, message, { messageId: `${key}-start` });
      const second = await runtime.handle(scriptedSaga, message, { messageId: `${key}-start` });
      expect(first).toMatchObject({ outcome: 'started', version: 0 });
      expect(second).toMatchObject({ outcome: 'duplicate', sagaId: first.sagaId, version: 0 });
      expect((await rows.sagas()).filter((s) => s.key === key)).toMatchObject([{ counter: 1, version: 0 }]);
      expect(await rows.outbox(first.sagaId!)).toHaveLength(1);
    });

    it('another message id, or none, is handled as usual', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('other');
      await runtime.handle(scriptedSaga, { type: 'Start', key }, { messageId: `${key}-a` });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-b` });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      expect(await rows.saga(key)).toMatchObject({ counter: 3, version: 3 });
    });

    it('a message that changes nothing is recorded too, so its redelivery is a duplicate even after the state moved on', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('noop');
      const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
      const noop = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [] }, { messageId: `${key}-noop` });
      expect(noop).toMatchObject({ outcome: 'handled', version: 0, changed: false });
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      const again = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-noop` });
      expect(again).toMatchObject({ outcome: 'duplicate', version: 0 });
      expect(await rows.saga(key)).toMatchObject({ counter: 1, version: 1, updatedAt: (await rows.saga(key))!.updatedAt });
      expect(await rows.handledMessages(started.sagaId!)).toHaveLength(1);
    });

    it('a step that throws records nothing, so the redelivery runs the step again', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('throws');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const failing = { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'throw', message: 'boom' }] } as const;
      await expect(runtime.handle(scriptedSaga, failing, { messageId: `${key}-m` })).rejects.toThrow('boom');
      const retried = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-m` });
      expect(retried).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await rows.saga(key)).toMatchObject({ counter: 1 });
    });

    it('an ignored message records nothing', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('ignored');
      const result = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [] }, { messageId: `${key}-m` });
      expect(result).toMatchObject({ outcome: 'ignored', reason: 'no-instance' });
      expect((await rows.handledMessages()).filter((m) => m.messageId === `${key}-m`)).toHaveLength(0);
    });

    it('ten concurrent deliveries of one id apply it once; the others answer duplicate', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('race');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const message = { type: 'Do', key, actions: incAndSend } as const;
      const results = await Promise.all(Array.from({ length: 10 }, () => runtime.handle(scriptedSaga, message, { messageId: `${key}-m` })));
      expect(results.filter((r) => r.outcome === 'handled')).toHaveLength(1);
      expect(results.filter((r) => r.outcome === 'duplicate').map((r) => r.version)).toEqual(Array(9).fill(1));
      const saga = await rows.saga(key);
      expect(saga).toMatchObject({ counter: 1, version: 1 });
      expect(await rows.outbox(saga!.id)).toHaveLength(1);
    });

    it('ten concurrent start messages with one id create one instance and apply it once', async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('race-start');
      const message = { type: 'Start', key, actions: incAndSend } as const;
      const results = await Promise.all(Array.from({ length: 10 }, () => runtime.handle(scriptedSaga, message, { messageId: `${key}-m` })));
      expect(results.filter((r) => r.outcome === 'started')).toHaveLength(1);
      expect(results.filter((r) => r.outcome === 'duplicate')).toHaveLength(9);
      expect((await rows.sagas()).filter((s) => s.key === key)).toMatchObject([{ counter: 1, version: 0 }]);
    });

    it('route() records the id once per saga type, so each saga applies it once', async () => {
      const other = scriptedVariant('Do', (saga) => {
        saga.counter += 10;
      });
      // Same table, another saga name: the record is per saga type and instance.
      const renamed = { ...other, name: 'scripted-copy' };
      const { runtime, rows } = setup({ sagas: [scriptedSaga, renamed] });
      const key = uniqueKey('route');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const message = { type: 'Do', key, actions: [{ op: 'inc' }] } as const;
      const first = await runtime.route(message, { messageId: `${key}-m` });
      const second = await runtime.route(message, { messageId: `${key}-m` });
      expect(first.map((r) => r.outcome)).toEqual(['handled', 'handled']);
      expect(second.map((r) => r.outcome)).toEqual(['duplicate', 'duplicate']);
      expect(await rows.saga(key)).toMatchObject({ counter: 11 });
    });

    it('ids older than the retention window are purged in bounded batches; a purged id is handled anew', async () => {
      const { runtime, rows, clock } = setup({ messageIds: { retentionMs: 60_000 } });
      const key = uniqueKey('purge');
      await runtime.handle(scriptedSaga, { type: 'Start', key }, { messageId: `${key}-0` });
      for (let i = 1; i <= 4; i++) {
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-${i}` });
      }
      clock.advance(30_000);
      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-young` });
      clock.advance(31_000);
      const sagaId = (await rows.saga(key))!.id;
      const purge = await runtime.purgeExpiredMessageIds({ batchSize: 2 });
      expect(purge.deleted).toBeGreaterThanOrEqual(5);
      expect(purge.batches).toBeGreaterThanOrEqual(3);
      expect((await rows.handledMessages(sagaId)).map((m) => m.messageId)).toEqual([`${key}-young`]);
      expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-1` })).toMatchObject({
        outcome: 'handled',
      });
      expect(
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-young` }),
      ).toMatchObject({
        outcome: 'duplicate',
      });
      expect(await rows.saga(key)).toMatchObject({ counter: 6 });
    });

    it('the default retention window is seven days', () => {
      expect(SagaRuntime.defaults.messageIds.retentionMs).toBe(7 * 24 * 3_600_000);
    });

    it.each([
      ['an empty string', ''],
      ['a number', 42],
      ['an object', { $ne: 'x' }],
      ['a string of 201 characters', 'x'.repeat(201)],
      ['a string with U+0000', 'a\u0000b'],
      ['a string with a lone surrogate', 'a\ud800b'],
    ])('a message id that is %s is refused with MESSAGE_ID_INVALID before anything is written', async (_, messageId) => {
      const { runtime, rows } = setup();
      const key = uniqueKey('bad-id');
      const before = (await rows.sagas()).length;
      const attempt = runtime.handle(scriptedSaga, { type: 'Start', key }, { messageId: messageId as string });
      await expect(attempt).rejects.toBeInstanceOf(SagaValidationError);
      await expect(attempt).rejects.toMatchObject({ code: 'MESSAGE_ID_INVALID' });
      expect(await rows.sagas()).toHaveLength(before);
    });
  });
}

for (const dialect of DIALECTS) {
  describe(`idempotent handling: completion, huge ids, a missing table (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const setup = () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      return { runtime, rows: rowsOf(db().orm) };
    };

    it('the redelivery of the message that completed the saga is a duplicate, not ignored', async () => {
      const { runtime } = setup();
      const key = uniqueKey('completing');
      await runtime.handle(scriptedSaga, { type: 'Start', key }, { messageId: `${key}-start` });
      const finish = { type: 'Do', key, actions: [{ op: 'complete' }] } as const;
      const first = await runtime.handle(scriptedSaga, finish, { messageId: `${key}-finish` });
      const again = await Promise.all(
        Array.from({ length: 5 }, () => runtime.handle(scriptedSaga, finish, { messageId: `${key}-finish` })),
      );
      const start = await runtime.handle(scriptedSaga, { type: 'Start', key }, { messageId: `${key}-start` });
      expect(first).toMatchObject({ outcome: 'handled', version: 1, completed: true });
      expect(again.map((r) => `${r.outcome}@${r.version}`)).toEqual(Array(5).fill('duplicate@1'));
      expect(start).toMatchObject({ outcome: 'duplicate', version: 0 });
      expect(runtime.stats()).toMatchObject({ duplicates: 6, ignoredCompleted: 0 });
    });

    it('a message id of ten million characters is refused as MESSAGE_ID_INVALID without being copied', async () => {
      const { runtime } = setup();
      const attempt = runtime.handle(scriptedSaga, { type: 'Start', key: uniqueKey('huge-id') }, { messageId: 'x'.repeat(10_000_000) });
      await expect(attempt).rejects.toMatchObject({ code: 'MESSAGE_ID_INVALID' });
    });

    it('without the saga_handled_message table, the lookup and the purge are SCHEMA_INVALID naming the table, not the id', async () => {
      const scratch = await createTestDatabase(dialect, [ScriptedSaga]);
      try {
        const runtime = new SagaRuntime({ em: scratch.orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
        const key = uniqueKey('no-table');
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        await scratch.orm.em.getConnection().execute('drop table "saga_handled_message"');
        const lookup = await runtime
          .handle(scriptedSaga, { type: 'Do', key, actions: [] }, { messageId: 'secret-token-123' })
          .catch((e: unknown) => e);
        expect(lookup).toBeInstanceOf(SagaSchemaError);
        expect(lookup).toMatchObject({ code: 'SCHEMA_INVALID' });
        expect((lookup as Error).message).toContain('saga_handled_message');
        expect((lookup as Error).message).toContain("library's migrations");
        expect((lookup as Error).message).not.toContain('secret-token-123');
        const purge = await runtime.purgeExpiredMessageIds().catch((e: unknown) => e);
        expect(purge).toBeInstanceOf(SagaSchemaError);
        expect((purge as Error).message).toContain('saga_handled_message');
      } finally {
        await scratch.dispose();
      }
    });
  });
}
