// The operator API on every database: find sagas, look at one, force-complete and reopen it; list, requeue, cancel
// and reschedule timers and outbox rows. Real rows, a fake clock, one dispatcher pass at a time.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type Duration,
  type OutboxEnvelope,
  SagaConcurrencyError,
  SagaDispatcher,
  SagaError,
  SagaOutbox,
  SagaRuntime,
  SagaTimer,
  silentLogger,
} from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { decodeCursor, encodeCursor } from '../../src/operations/page-cursor.js';
import { EARLIEST_STATE_DATE_MS, LATEST_STATE_DATE_MS } from '../../src/saga/state-values.js';
import { FakeClock } from '../../src/testing/index.js';
import { NumberedSaga, numberedSaga } from '../fixtures/numbered-saga.js';
import { type Action, failingTimer, ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { refuseInserts, rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

/** A timer message whose step throws: its deliveries fail until it is dead-lettered. */
const YEAR: Duration = { days: 365 };
/** The filters of `listSagas({ sagaType: 'scripted' })`, as its cursors digest them. */
const SAGAS = { types: ['scripted'], status: 'all' };

describe('page cursors (no database)', () => {
  const filters = { types: ['scripted'], status: 'all' };
  const valid = encodeCursor({ createdAtMs: 1_767_600_000_000, sagaType: 'scripted', id: '0190b6d2-7c1e-7aaa-8bbb-123456789abc' }, filters);
  const known = new Set(['scripted']);
  const refused = (cursor: unknown, with_ = filters) => {
    try {
      decodeCursor(cursor, with_, known);
      return false;
    } catch (error) {
      expect(error).toMatchObject({ code: 'CURSOR_INVALID' });
      return true;
    }
  };

  it('reads back exactly what it wrote, and only with the same filters', () => {
    expect(decodeCursor(valid, filters, known)).toEqual({
      createdAtMs: 1_767_600_000_000,
      sagaType: 'scripted',
      id: '0190b6d2-7c1e-7aaa-8bbb-123456789abc',
    });
    expect(refused(valid, { ...filters, status: 'active' })).toBe(true);
  });

  it('refuses any other text, and any one-character edit of a cursor, as CURSOR_INVALID', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 300 }), (text) => text === valid || refused(text)),
      { numRuns: 300 },
    );
    fc.assert(
      fc.property(fc.nat(valid.length - 1), fc.constantFrom(...'ABCabc019-_'), (at, char) => {
        const edited = valid.slice(0, at) + char + valid.slice(at + 1);
        return edited === valid || refused(edited);
      }),
      { numRuns: 300 },
    );
  });
});

for (const dialect of DIALECTS) {
  describe(`operator API (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, NumberedSaga]);
    const setup = (at = '2026-01-05T09:00:00Z') => {
      const clock = new FakeClock(at);
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga, numberedSaga], clock });
      const sent: OutboxEnvelope[] = [];
      const dispatcher = new SagaDispatcher({
        runtime,
        logger: silentLogger,
        maxAttempts: 2,
        backoff: { baseMs: 1_000, maxMs: 1_000, jitter: false },
        publish: async (envelope) => {
          if (envelope.type === 'Refused') throw new Error('broker refused');
          sent.push(envelope);
        },
      });
      const ops = new SagaOperations({ runtime });
      const start = async (key: string, actions: Action[] = []) => {
        const result = await runtime.handle(scriptedSaga, { type: 'Start', key, actions });
        return result.sagaId!;
      };
      /** Two failing passes a second apart: the due timers (and refused outbox rows) are dead-lettered. */
      const deadLetterDue = async () => {
        clock.advance(1_000);
        await dispatcher.runOnce();
        clock.advance(1_000);
        await dispatcher.runOnce();
      };
      return { clock, runtime, dispatcher, ops, start, sent, deadLetterDue, rows: rowsOf(db().orm) };
    };
    const errorOf = (promise: Promise<unknown>) =>
      promise.then(
        () => undefined,
        (error: unknown) => error,
      );

    it('is built from a runtime, or from the EntityManager and the sagas; a wrong option is OPTION_INVALID', async () => {
      const { start } = setup();
      const id = await start(uniqueKey('built'));
      const clock = new FakeClock('2026-01-05T09:00:00Z');
      const ops = new SagaOperations({ em: db().orm.em, sagas: [scriptedSaga], clock });
      expect(ops.sagaTypes).toEqual(['scripted']);
      expect((await ops.getSaga({ sagaType: 'scripted', sagaId: id }))?.id).toBe(id);
      await expect(ops.listSagas({ sagaType: 'numbered', limit: 1 })).rejects.toMatchObject({ code: 'SAGA_TYPE_UNKNOWN' });
      for (const options of [undefined, {}, { runtime: {} }, { em: db().orm.em, sagas: 'x' }]) {
        expect(() => new SagaOperations(options as never)).toThrow(expect.objectContaining({ code: 'OPTION_INVALID' }));
      }
    });

    it('an input whose getter or Proxy trap throws is OPTION_INVALID for every call, never PERSISTENCE_FAILED; nothing is written', async () => {
      const { ops, start, rows } = setup();
      const id = await start(uniqueKey('getter'), [{ op: 'schedule', name: 't', after: 1_000 }]);
      const secret = 'secret-getter-text';
      /** `value` whose property `key` throws when read. */
      const throwing = <T extends object>(value: T, key: string): T =>
        Object.defineProperty({ ...value }, key, {
          enumerable: true,
          get() {
            throw new Error(secret);
          },
        });
      const trap = new Proxy([id], {
        get() {
          throw new TypeError(secret);
        },
      });
      const date = new Proxy(new Date('2040-01-01T00:00:00Z'), {
        getPrototypeOf() {
          throw new Error(secret);
        },
      });
      const change = { sagaType: 'scripted', sagaId: id, reason: 'operator' };
      const before = await rows.counts();
      const calls: [string, () => Promise<unknown>][] = [
        ['listSagas', () => ops.listSagas(throwing({ limit: 5 }, 'limit'))],
        ['listSagas', () => ops.listSagas(throwing({ limit: 5 }, 'cursor'))],
        ['getSaga', () => ops.getSaga(throwing({ sagaType: 'scripted', sagaId: id }, 'sagaId'))],
        ['listTimers', () => ops.listTimers(throwing({ limit: 5 }, 'status'))],
        ['listOutbox', () => ops.listOutbox(throwing({ limit: 5 }, 'sagaId'))],
        ['forceComplete', () => ops.forceComplete(throwing(change, 'reason'))],
        ['reopen', () => ops.reopen(throwing(change, 'expectedVersion'))],
        ['requeueTimers', () => ops.requeueTimers(trap)],
        ['cancelTimers', () => ops.cancelTimers(trap)],
        ['rescheduleTimers', () => ops.rescheduleTimers([id], date)],
        ['purge', () => ops.purge(throwing({ expiredMessageIds: true }, 'batchSize'))],
      ];
      for (const [operation, call] of calls) {
        const error = await errorOf(call());
        expect(error, operation).toMatchObject({ code: 'OPTION_INVALID', details: { operation } });
        expect((error as Error).message).not.toContain(secret);
      }
      expect(await rows.counts()).toEqual(before);
    });

    describe('listing sagas', () => {
      it('lists both types newest first, filtered in SQL, and walks every page once with the cursor', async () => {
        const { clock, runtime, ops, start } = setup('2031-03-01T00:00:00Z');
        const from = clock.now();
        const created: string[] = [];
        for (let i = 0; i < 5; i++) {
          created.push(await start(uniqueKey('list')));
          created.push((await runtime.handle(numberedSaga, { type: 'Touch', number: 310_000 + i })).sagaId!);
          if (i % 2 === 0) clock.advance(1_000); // pairs share a created_at: the order then goes by type and id
        }
        const query = { createdAfter: from, createdBefore: clock.now(), limit: 3 } as const;
        const pages: string[][] = [];
        let cursor: string | undefined;
        do {
          const page = await ops.listSagas({ ...query, createdBefore: new Date(clock.now().getTime() + 1), cursor });
          pages.push(page.items.map((s) => s.id));
          cursor = page.nextCursor ?? undefined;
        } while (cursor);
        expect(pages.map((p) => p.length)).toEqual([3, 3, 3, 1]);
        const walked = pages.flat();
        expect(new Set(walked)).toEqual(new Set(created));
        const all = await ops.listSagas({ ...query, createdBefore: new Date(clock.now().getTime() + 1), limit: 10 });
        expect(all.items.map((s) => s.id)).toEqual(walked);
        const keys = all.items.map((s) => [s.createdAt.getTime(), s.sagaType, s.id] as const);
        const sorted = [...keys].sort((a, b) => b[0] - a[0] || (b[1] > a[1] ? 1 : b[1] < a[1] ? -1 : b[2] > a[2] ? 1 : -1));
        expect(keys).toEqual(sorted);
        expect(all.nextCursor).toBeNull();
      });

      it('filters by status, correlation, step and creation time', async () => {
        const { clock, ops, start, runtime } = setup('2032-01-01T00:00:00Z');
        const from = clock.now();
        const active = uniqueKey('active');
        const done = uniqueKey('done');
        await start(active, [{ op: 'stage', stage: 'waiting' }]);
        clock.advance(60_000);
        const doneId = await start(done);
        await runtime.handle(scriptedSaga, { type: 'Do', key: done, actions: [{ op: 'complete' }] });
        const window = { sagaType: 'scripted', createdAfter: from, limit: 10 } as const;
        expect((await ops.listSagas({ ...window, status: 'active' })).items.map((s) => s.correlation)).toEqual([active]);
        expect((await ops.listSagas({ ...window, status: 'completed' })).items).toMatchObject([{ id: doneId, correlation: done }]);
        expect((await ops.listSagas({ ...window, step: 'waiting' })).items).toMatchObject([{ correlation: active, step: 'waiting' }]);
        expect((await ops.listSagas({ sagaType: 'scripted', correlation: done, limit: 5 })).items.map((s) => s.id)).toEqual([doneId]);
        expect((await ops.listSagas({ ...window, createdBefore: new Date(from.getTime() + 1) })).items.map((s) => s.correlation)).toEqual([
          active,
        ]);
        const completed = (await ops.listSagas({ ...window, status: 'completed' })).items[0]!;
        expect(completed.completedAt).toEqual(clock.now());
        expect(completed.version).toBe(1);
      });

      it('refuses bad input with typed errors that quote no value, before reading', async () => {
        const { ops } = setup();
        const secret = 'secret-correlation-42';
        const cases: [() => Promise<unknown>, string][] = [
          [() => ops.listSagas({} as never), 'OPTION_INVALID'],
          [() => ops.listSagas({ limit: 0 }), 'OPTION_INVALID'],
          [() => ops.listSagas({ limit: 1.5 }), 'OPTION_INVALID'],
          [() => ops.listSagas({ limit: 1_001 }), 'OPTION_INVALID'],
          [() => ops.listSagas({ limit: 5, sagaType: 'nope' }), 'SAGA_TYPE_UNKNOWN'],
          [() => ops.listSagas({ limit: 5, correlation: secret }), 'OPTION_INVALID'],
          [() => ops.listSagas({ limit: 5, sagaType: 'numbered', step: 'x' }), 'OPTION_INVALID'],
          [() => ops.listSagas({ limit: 5, sagaType: 'numbered', correlation: secret }), 'CORRELATION_INVALID'],
          [() => ops.listSagas({ limit: 5, createdAfter: new Date('nope') }), 'OPTION_INVALID'],
          [() => ops.listSagas({ limit: 5, status: 'stuck' as never }), 'OPTION_INVALID'],
          [() => ops.getSaga({ sagaType: 'scripted', sagaId: secret }), 'OPTION_INVALID'],
          [() => ops.getSaga({ sagaType: 'scripted' }), 'OPTION_INVALID'],
        ];
        for (const [attempt, code] of cases) {
          const error = await errorOf(attempt());
          expect(error, code).toBeInstanceOf(SagaError);
          expect(error).toMatchObject({ code });
          expect((error as Error).message).not.toContain(secret);
        }
      });

      it('refuses a tampered cursor, and one from other filters, as CURSOR_INVALID', async () => {
        const { ops, start, clock } = setup('2033-01-01T00:00:00Z');
        const from = clock.now();
        await start(uniqueKey('cursor'));
        clock.advance(1);
        await start(uniqueKey('cursor'));
        const page = await ops.listSagas({ createdAfter: from, limit: 1 });
        const cursor = page.nextCursor!;
        expect(cursor).toEqual(expect.any(String));
        const body = JSON.parse(Buffer.from(cursor, 'base64url').toString()) as unknown[];
        const edited = Buffer.from(JSON.stringify([body[0], 0, body[2], body[3], body[4]])).toString('base64url');
        for (const bad of [`${cursor}x`, cursor.slice(0, -3), edited, 'not a cursor', 42]) {
          await expect(ops.listSagas({ createdAfter: from, limit: 1, cursor: bad as string })).rejects.toMatchObject({
            code: 'CURSOR_INVALID',
          });
        }
        await expect(ops.listSagas({ createdAfter: from, limit: 1, cursor, status: 'active' })).rejects.toMatchObject({
          code: 'CURSOR_INVALID',
        });
        // Keyset pages: a saga created meanwhile (newer) does not shift the next page.
        clock.advance(1);
        await start(uniqueKey('cursor'));
        const next = await ops.listSagas({ createdAfter: from, limit: 1, cursor });
        expect(next.items.map((s) => s.createdAt)).toEqual([from]);
      });

      it('refuses a cursor built with a valid digest but a created_at outside years 1 to 9999 as CURSOR_INVALID, before SQL', async () => {
        const { ops, start } = setup('2033-02-01T00:00:00Z');
        await start(uniqueKey('forged'), [
          { op: 'schedule', name: 't', after: 1_000 },
          { op: 'send', message: { type: 'Hello' } },
        ]);
        // The digest is not a secret: anyone can build a cursor for these filters (see page-cursor.ts).
        const id = '0190b6d2-7c1e-7aaa-8bbb-123456789abc';
        const listings = [
          (createdAtMs: number) =>
            ops.listSagas({ sagaType: 'scripted', limit: 1, cursor: encodeCursor({ createdAtMs, sagaType: 'scripted', id }, SAGAS) }),
          (createdAtMs: number) =>
            ops.listTimers({ limit: 1, cursor: encodeCursor({ createdAtMs, sagaType: '', id }, { table: 'saga_timer' }) }),
          (createdAtMs: number) =>
            ops.listOutbox({ limit: 1, cursor: encodeCursor({ createdAtMs, sagaType: '', id }, { table: 'saga_outbox' }) }),
        ];
        for (const list of listings) {
          // The first and last instants a row can have are taken (so the digest is right)...
          for (const at of [EARLIEST_STATE_DATE_MS, LATEST_STATE_DATE_MS]) await expect(list(at)).resolves.toHaveProperty('items');
          // ...anything outside them was PERSISTENCE_FAILED on PostgreSQL and SCHEMA_INVALID on SQLite.
          for (const at of [9e15, -8.64e15, Date.UTC(10_000, 0, 1), EARLIEST_STATE_DATE_MS - 1, LATEST_STATE_DATE_MS + 1]) {
            await expect(list(at), String(at)).rejects.toMatchObject({ code: 'CURSOR_INVALID' });
          }
        }
      });
    });

    describe('one saga', () => {
      it('shows its state, pending and recent timers, outbox rows and handled message ids', async () => {
        const { clock, runtime, dispatcher, ops, start } = setup();
        const key = uniqueKey('detail');
        const id = await start(key, [
          { op: 'inc', by: 7 },
          { op: 'schedule', name: 'soon', after: 1_000 },
          { op: 'schedule', name: 'later', after: YEAR },
          { op: 'send', message: { type: 'Hello' } },
        ]);
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: 'n' }] }, { messageId: 'm-1' });
        clock.advance(1_000);
        await dispatcher.runOnce();
        const detail = (await ops.getSaga({ sagaType: 'scripted', sagaId: id }))!;
        expect(detail).toMatchObject({ sagaType: 'scripted', id, correlation: key, step: 'open', version: 2, completedAt: null });
        expect(detail.state).toMatchObject({ key, counter: 7, log: 'started;n;tick:soon;' });
        expect(detail.pendingTimers.map((t) => [t.name, t.status])).toEqual([['later', 'pending']]);
        expect(detail.recentTimers.map((t) => [t.name, t.status])).toEqual([['soon', 'fired']]);
        expect(detail.outbox).toMatchObject([{ messageType: 'Hello', status: 'published', payload: { type: 'Hello' } }]);
        expect(detail.messageIds).toMatchObject([{ messageId: 'm-1', version: 1 }]);
        expect((await ops.getSaga({ sagaType: 'scripted', correlation: key, recent: 1 }))?.id).toBe(id);
        expect(await ops.getSaga({ sagaType: 'scripted', correlation: uniqueKey('none') })).toBeUndefined();
      });

      it('counts the active sagas of each type', async () => {
        const { ops, start, runtime } = setup();
        const before = await ops.countActiveSagas();
        await start(uniqueKey('count'));
        const done = uniqueKey('count');
        await start(done);
        await runtime.handle(scriptedSaga, { type: 'Do', key: done, actions: [{ op: 'complete' }] });
        const after = await ops.countActiveSagas();
        expect(after.map((c) => c.sagaType)).toEqual(['scripted', 'numbered']);
        expect(after[0]!.active - before[0]!.active).toBe(1);
        expect(after[1]!.active).toBe(before[1]!.active);
      });
    });

    describe('force-complete and reopen', () => {
      it('force-complete completes, deletes the pending timers and writes an audit message, in one versioned change', async () => {
        const { clock, ops, start, rows } = setup();
        const key = uniqueKey('force');
        const id = await start(key, [
          { op: 'schedule', name: 'a', after: YEAR },
          { op: 'schedule', name: 'b', after: YEAR },
        ]);
        const change = await ops.forceComplete({ sagaType: 'scripted', sagaId: id, reason: 'customer called', expectedVersion: 0 });
        expect(change).toMatchObject({ sagaType: 'scripted', sagaId: id, version: 1, timersCancelled: 2 });
        expect(await rows.saga(key)).toMatchObject({ version: 1, completedAt: clock.now() });
        expect(await rows.pendingTimers(id)).toEqual([]);
        const [audit] = await rows.outbox(id);
        expect(audit).toMatchObject({
          id: change.auditMessageId,
          messageType: 'SagaForceCompleted',
          payload: {
            type: 'SagaForceCompleted',
            sagaType: 'scripted',
            sagaId: id,
            reason: 'customer called',
            version: 1,
            timersCancelled: 2,
          },
          dispatchedAt: null,
        });
        expect(audit!.headers).toEqual({ 'saga-type': 'scripted', 'saga-id': id, 'operator-action': 'forceComplete' });
        await expect(ops.forceComplete({ sagaType: 'scripted', sagaId: id, reason: 'again' })).rejects.toMatchObject({
          code: 'SAGA_STATE_CONFLICT',
        });

        const reopened = await ops.reopen({ sagaType: 'scripted', sagaId: id, reason: 'refund late', expectedVersion: 1 });
        expect(reopened).toMatchObject({ version: 2, timersCancelled: 0 });
        expect(await rows.saga(key)).toMatchObject({ version: 2, completedAt: null });
        expect(await rows.pendingTimers(id)).toEqual([]); // reopening restores no timer
        expect((await rows.outbox(id)).map((o) => o.messageType).sort()).toEqual(['SagaForceCompleted', 'SagaReopened']);
        await expect(ops.reopen({ sagaType: 'scripted', sagaId: id, reason: 'again' })).rejects.toMatchObject({
          code: 'SAGA_STATE_CONFLICT',
        });
      });

      it('a stale version is VERSION_CONFLICT and writes nothing', async () => {
        const { ops, start, rows, runtime } = setup();
        const key = uniqueKey('stale');
        const id = await start(key, [{ op: 'schedule', name: 'a', after: YEAR }]);
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
        const error = await errorOf(ops.forceComplete({ sagaType: 'scripted', sagaId: id, reason: 'stuck', expectedVersion: 0 }));
        expect(error).toBeInstanceOf(SagaConcurrencyError);
        expect(error).toMatchObject({ code: 'VERSION_CONFLICT', details: { sagaType: 'scripted', sagaId: id } });
        expect(await rows.saga(key)).toMatchObject({ version: 1, completedAt: null });
        expect(await rows.pendingTimers(id)).toHaveLength(1);
        expect(await rows.outbox(id)).toEqual([]);
      });

      it('refuses an unknown saga, a bad id and a bad reason, writing nothing', async () => {
        const { ops, start, rows } = setup();
        const key = uniqueKey('refuse');
        const id = await start(key);
        const before = await rows.counts();
        const missing = '00000000-0000-4000-8000-000000000000';
        await expect(ops.forceComplete({ sagaType: 'scripted', sagaId: missing, reason: 'x' })).rejects.toMatchObject({
          code: 'SAGA_NOT_FOUND',
        });
        for (const reason of ['', '   ', 'x'.repeat(501), 'a\u0000b', 7]) {
          await expect(ops.forceComplete({ sagaType: 'scripted', sagaId: id, reason: reason as string })).rejects.toMatchObject({
            code: 'OPTION_INVALID',
          });
        }
        await expect(ops.forceComplete({ sagaType: 'scripted', sagaId: 'x', reason: 'r' })).rejects.toMatchObject({
          code: 'OPTION_INVALID',
        });
        await expect(ops.forceComplete({ sagaType: 'scripted', sagaId: id, reason: 'r', expectedVersion: -1 })).rejects.toMatchObject({
          code: 'OPTION_INVALID',
        });
        await expect(ops.reopen({ sagaType: 'other', sagaId: id, reason: 'r' })).rejects.toMatchObject({ code: 'SAGA_TYPE_UNKNOWN' });
        expect(await rows.counts()).toEqual(before);
        expect(await rows.saga(key)).toMatchObject({ version: 0, completedAt: null });
      });
    });

    describe('timers', () => {
      it('lists by status, saga and name; requeues a dead-lettered timer with attempts reset and a new token', async () => {
        const { ops, start, deadLetterDue, rows } = setup();
        const id = await start(uniqueKey('dead'), [failingTimer('boom'), { op: 'schedule', name: 'later', after: YEAR }]);
        await deadLetterDue();
        const dead = await ops.listTimers({ status: 'dead_lettered', sagaId: id, limit: 10 });
        expect(dead.items).toMatchObject([
          { name: 'boom', status: 'dead_lettered', attempts: 2, lastError: expect.stringContaining('boom') },
        ]);
        expect((await ops.listTimers({ status: 'pending', sagaId: id, limit: 10 })).items.map((t) => t.name)).toEqual(['later']);
        expect((await ops.listTimers({ sagaId: id, name: 'later', limit: 10 })).items).toHaveLength(1);
        expect((await ops.listTimers({ sagaType: 'scripted', messageType: 'Tick', sagaId: id, limit: 10 })).items).toHaveLength(2);
        const before = (await rows.timers({ id: dead.items[0]!.id }))[0]!;

        const missing = '00000000-0000-4000-8000-000000000001';
        const result = await ops.requeueTimers([dead.items[0]!.id, missing, dead.items[0]!.id]);
        expect(result).toEqual({
          requested: 2,
          affected: 1,
          items: [
            { id: dead.items[0]!.id, status: 'requeued' },
            { id: missing, status: 'not_found' },
          ],
        });
        const after = (await rows.timers({ id: before.id }))[0]!;
        expect(after).toMatchObject({ dispatchedAt: null, outcome: null, attempts: 0, deadLetteredAt: null, lockedUntil: null });
        expect(after.token).not.toBe(before.token);
        expect((await ops.requeueTimers([before.id])).items).toEqual([{ id: before.id, status: 'not_dead_lettered' }]);
      });

      it('a requeue whose name is pending again on the saga is a per-item conflict, and the row stays dead-lettered', async () => {
        const { ops, start, deadLetterDue, runtime, rows } = setup();
        const key = uniqueKey('conflict');
        const id = await start(key, [failingTimer('boom')]);
        await deadLetterDue();
        const [dead] = (await ops.listTimers({ status: 'dead_lettered', sagaId: id, limit: 1 })).items;
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'boom', after: YEAR }] });
        const other = (await rows.timers({ sagaId: id, name: 'boom' })).find((t) => t.id !== dead!.id)!;
        const result = await ops.requeueTimers([dead!.id, other.id]);
        expect(result.items).toEqual([
          { id: dead!.id, status: 'conflict' },
          { id: other.id, status: 'not_dead_lettered' },
        ]);
        expect(result.affected).toBe(0);
        expect((await rows.timers({ id: dead!.id }))[0]).toMatchObject({ outcome: 'dead_lettered' });
      });

      it('a requeue of a timer its saga would discard (completed, or gone) is saga_completed / saga_not_found, left dead-lettered', async () => {
        const { ops, start, deadLetterDue, rows, dispatcher, clock } = setup();
        const key = uniqueKey('closed');
        // `Do` runs on a completed scripted saga (handleCompleted); `Tick` does not.
        const failingDo: Action = {
          op: 'schedule',
          name: 'retry',
          after: 1_000,
          message: { type: 'Do', key, actions: [{ op: 'throw', message: 'boom' }] },
        };
        const closed = await start(key, [failingTimer('boom'), failingDo]);
        const gone = await start(uniqueKey('gone'), [failingTimer('boom')]);
        await deadLetterDue();
        await ops.forceComplete({ sagaType: 'scripted', sagaId: closed, reason: 'cancelled' });
        await db().orm.em.getConnection().execute(`delete from scripted_saga where id = '${gone}'`);
        const dead = async (sagaId: string, name: string) => (await rows.timers({ sagaId, name }))[0]!;
        const [tick, handled, orphan] = [await dead(closed, 'boom'), await dead(closed, 'retry'), await dead(gone, 'boom')];

        const result = await ops.requeueTimers([tick.id, handled.id, orphan.id]);
        expect(result).toEqual({
          requested: 3,
          affected: 1,
          items: [
            { id: tick.id, status: 'saga_completed' },
            { id: handled.id, status: 'requeued' },
            { id: orphan.id, status: 'saga_not_found' },
          ],
        });
        for (const id of [tick.id, orphan.id])
          expect((await rows.timers({ id }))[0]).toMatchObject({ outcome: 'dead_lettered', attempts: 2 });
        // The requeued one is delivered to the completed saga, which handles `Do`: fired, not discarded.
        clock.advance(1_000);
        await dispatcher.runOnce();
        expect((await rows.timers({ id: handled.id }))[0]).toMatchObject({ outcome: 'fired' });
      });

      it('a requeue the database refuses for one row reports that row failed, by class name, and still requeues the rest', async () => {
        const { ops, start, deadLetterDue, rows } = setup();
        const id = await start(uniqueKey('halfway'), [failingTimer('first'), failingTimer('refused'), failingTimer('last')]);
        await deadLetterDue();
        const dead = await rows.timers({ sagaId: id });
        const idOf = (name: string) => dead.find((t) => t.name === name)!.id;
        const ids = ['first', 'refused', 'last'].map(idOf);
        // Stands in for any failure of one statement: a lock timeout, a statement timeout, a check.
        const allow = await refuseInserts(db().orm, 'saga_timer', 'name', 'refused');
        const result = await ops.requeueTimers(ids).finally(allow);
        expect(result).toEqual({
          requested: 3,
          affected: 2,
          items: [
            { id: ids[0], status: 'requeued' },
            { id: ids[1], status: 'failed', error: expect.stringMatching(/^[A-Z]\w*Exception$/) },
            { id: ids[2], status: 'requeued' },
          ],
        });
        const after = await rows.timers({ sagaId: id });
        expect(after.map((t) => [t.name, t.outcome]).sort()).toEqual([
          ['first', null],
          ['last', null],
          ['refused', 'dead_lettered'],
        ]);
      });

      it("walks a saga's timers and outbox rows page by page, newest first, each once", async () => {
        const { ops, start, clock, runtime } = setup();
        const key = uniqueKey('pages');
        const id = await start(key);
        for (const name of ['a', 'b', 'c', 'd', 'e']) {
          if (name !== 'c') clock.advance(1); // b and c share a created_at: their ids (UUIDv7, in creation order) decide
          const actions: Action[] = [
            { op: 'schedule', name, after: YEAR },
            { op: 'send', message: { type: 'Hello', name } },
          ];
          await runtime.handle(scriptedSaga, { type: 'Do', key, actions });
        }
        const walk = async (list: (cursor: string | undefined) => Promise<{ items: readonly unknown[]; nextCursor: string | null }>) => {
          const seen: unknown[] = [];
          const sizes: number[] = [];
          let cursor: string | undefined;
          do {
            const page = await list(cursor);
            seen.push(...page.items);
            sizes.push(page.items.length);
            cursor = page.nextCursor ?? undefined;
          } while (cursor);
          return { seen, sizes };
        };
        const timers = await walk((cursor) => ops.listTimers({ sagaId: id, limit: 2, cursor }));
        expect(timers.sizes).toEqual([2, 2, 1]);
        expect(timers.seen.map((t) => (t as { name: string }).name)).toEqual(['e', 'd', 'c', 'b', 'a']);
        const outbox = await walk((cursor) => ops.listOutbox({ sagaId: id, messageType: 'Hello', limit: 3, cursor }));
        expect(outbox.sizes).toEqual([3, 2]);
        expect(outbox.seen.map((o) => (o as { payload: { name: string } }).payload.name)).toEqual(['e', 'd', 'c', 'b', 'a']);
      });

      it('tells leased from pending by the lease and the clock', async () => {
        const { ops, start, clock } = setup();
        const id = await start(uniqueKey('leased'), [{ op: 'schedule', name: 'held', after: YEAR }]);
        const em = db().orm.em.fork();
        await em.nativeUpdate(SagaTimer, { sagaId: id }, { lockedUntil: new Date(clock.now().getTime() + 30_000) });
        expect((await ops.listTimers({ status: 'leased', sagaId: id, limit: 5 })).items.map((t) => t.status)).toEqual(['leased']);
        expect((await ops.listTimers({ status: 'pending', sagaId: id, limit: 5 })).items).toEqual([]);
        clock.advance(30_000);
        expect((await ops.listTimers({ status: 'pending', sagaId: id, limit: 5 })).items.map((t) => t.status)).toEqual(['pending']);
      });

      it('cancels a pending timer and reschedules one, which then fires at its new time', async () => {
        const { clock, ops, start, dispatcher, rows } = setup();
        const key = uniqueKey('resched');
        const id = await start(key, [
          { op: 'schedule', name: 'cancel-me', after: YEAR },
          { op: 'schedule', name: 'move-me', after: YEAR },
        ]);
        const timers = await rows.pendingTimers(id);
        const cancel = timers.find((t) => t.name === 'cancel-me')!;
        const move = timers.find((t) => t.name === 'move-me')!;
        expect(await ops.cancelTimers([cancel.id])).toEqual({ requested: 1, affected: 1, items: [{ id: cancel.id, status: 'cancelled' }] });
        expect((await ops.cancelTimers([cancel.id])).items).toEqual([{ id: cancel.id, status: 'not_found' }]);
        const dueAt = new Date(clock.now().getTime() + 5_000);
        expect((await ops.rescheduleTimers([move.id], dueAt)).items).toEqual([{ id: move.id, status: 'rescheduled' }]);
        const moved = (await rows.timers({ id: move.id }))[0]!;
        expect(moved).toMatchObject({ dueAt, availableAt: dueAt });
        expect(moved.token).not.toBe(move.token);
        clock.advance(5_000);
        await dispatcher.runOnce();
        expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:move-me;' });
        expect((await ops.rescheduleTimers([move.id], dueAt)).items).toEqual([{ id: move.id, status: 'not_pending' }]);
        expect((await ops.cancelTimers([move.id])).items).toEqual([{ id: move.id, status: 'not_pending' }]);
        await expect(ops.rescheduleTimers([move.id], new Date(Number.NaN))).rejects.toMatchObject({ code: 'OPTION_INVALID' });
        expect(await ops.cancelTimers([])).toEqual({ requested: 0, affected: 0, items: [] });
        await expect(ops.cancelTimers('x' as never)).rejects.toMatchObject({ code: 'OPTION_INVALID' });
        await expect(ops.cancelTimers(['DROP TABLE'])).rejects.toMatchObject({ code: 'OPTION_INVALID' });
      });
      for (const change of ['cancel', 'reschedule'] as const) {
        it(`a ${change} while the timer's step runs drops that delivery as stale: the step's changes and messages are not kept`, async () => {
          // Before every other test's timers, so the pass claims only this one.
          const { clock, ops, start, rows } = setup('2020-01-01T00:00:00Z');
          const key = uniqueKey(`inflight-${change}`);
          const id = await start(key, [{ op: 'schedule', name: 'held', after: { minutes: 1 } }]);
          const [timer] = await rows.pendingTimers(id);
          const entered = deferred();
          const gate = deferred();
          const gated = scriptedSagaWithTick(async (saga, _message, ctx) => {
            entered.resolve();
            await gate.promise;
            saga.log += 'tick;';
            ctx.send({ type: 'FromStep' });
          });
          const runtime = new SagaRuntime({ em: db().orm.em, sagas: [gated], clock });
          const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, publish: async () => {} });
          clock.advance({ minutes: 2 });
          const pass = dispatcher.runOnce();
          await entered.promise;
          const later = new Date('2099-01-01T00:00:00Z');
          const result = change === 'cancel' ? await ops.cancelTimers([timer!.id]) : await ops.rescheduleTimers([timer!.id], later);
          expect(result.affected).toBe(1);
          gate.resolve();
          expect((await pass).timers).toMatchObject({ claimed: 1, fired: 0, stale: 1 });
          expect(await rows.saga(key)).toMatchObject({ log: 'started;' });
          expect((await rows.outbox(id)).map((o) => o.messageType)).toEqual([]);
          const left = await rows.timers({ id: timer!.id });
          if (change === 'cancel') expect(left).toEqual([]);
          else expect(left).toMatchObject([{ dispatchedAt: null, dueAt: later }]);
        });
      }

      it('refuses a sparse ids array (its holes are not ids) as OPTION_INVALID, changing nothing', async () => {
        const { ops, start, rows } = setup();
        const id = await start(uniqueKey('sparse'), [{ op: 'schedule', name: 'kept', after: YEAR }]);
        const [timer] = await rows.pendingTimers(id);
        const sparse: string[] = new Array(3);
        sparse[0] = timer!.id;
        await expect(ops.cancelTimers(sparse)).rejects.toMatchObject({
          code: 'OPTION_INVALID',
          message: expect.stringContaining('ids[1]'),
        });
        await expect(ops.rescheduleTimers(sparse, new Date('2027-01-01'))).rejects.toMatchObject({ code: 'OPTION_INVALID' });
        await expect(ops.requeueTimers(new Array(3))).rejects.toMatchObject({ code: 'OPTION_INVALID' });
        await expect(ops.requeueOutbox(new Array(1))).rejects.toMatchObject({ code: 'OPTION_INVALID' });
        expect(await rows.timers({ id: timer!.id })).toMatchObject([{ dueAt: timer!.dueAt, token: timer!.token, dispatchedAt: null }]);
      });
    });

    describe('outbox rows', () => {
      it('lists by status and requeues a dead-lettered row, which the dispatcher then relays', async () => {
        const { ops, start, deadLetterDue, dispatcher, sent, rows } = setup();
        const id = await start(uniqueKey('outbox'), [
          { op: 'send', message: { type: 'Refused' } },
          { op: 'send', message: { type: 'Fine' } },
        ]);
        await deadLetterDue();
        const dead = await ops.listOutbox({ status: 'dead_lettered', sagaId: id, limit: 5 });
        expect(dead.items).toMatchObject([{ messageType: 'Refused', status: 'dead_lettered', attempts: 2 }]);
        expect((await ops.listOutbox({ status: 'published', sagaId: id, limit: 5 })).items.map((o) => o.messageType)).toEqual(['Fine']);
        expect(sent.filter((e) => e.sagaId === id).map((e) => e.type)).toEqual(['Fine']);
        expect((await ops.requeueOutbox([dead.items[0]!.id])).items).toEqual([{ id: dead.items[0]!.id, status: 'requeued' }]);
        expect((await rows.outbox(id)).find((o) => o.messageType === 'Refused')).toMatchObject({ dispatchedAt: null, attempts: 0 });
        await dispatcher.runOnce();
        expect((await rows.outbox(id)).find((o) => o.messageType === 'Refused')).toMatchObject({ attempts: 1, dispatchedAt: null });
        await expect(ops.listOutbox({ status: 'fired', limit: 5 })).rejects.toMatchObject({ code: 'OPTION_INVALID' });
        await expect(ops.listOutbox({ name: 'x', limit: 5 })).rejects.toMatchObject({ code: 'OPTION_INVALID' });
        expect(await db().orm.em.fork().count(SagaOutbox, { sagaId: id })).toBe(2);
      });
    });
  });
}
