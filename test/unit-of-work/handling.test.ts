// Handling messages on every database: correlation, starting, ignoring, one transaction, no empty writes.
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaPersistenceError, SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { refuseInserts, rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`handling messages (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const setup = () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      return { clock, runtime, rows: rowsOf(db().orm) };
    };

    describe('correlation', () => {
      it('a start message creates one instance at version 0 with the correlation value set', async () => {
        const { runtime, rows, clock } = setup();
        const key = uniqueKey('start');
        const result = await runtime.handle(scriptedSaga, { type: 'Start', key });
        expect(result).toMatchObject({ outcome: 'started', version: 0, changed: true, step: 'open' });
        const saga = await rows.saga(key);
        expect(saga).toMatchObject({ id: result.sagaId, version: 0, log: 'started;', completedAt: null });
        expect(saga?.createdAt).toEqual(clock.now());
        expect(saga?.updatedAt).toEqual(clock.now());
      });

      it('a message that is not a start message and finds no instance is ignored, counted, and writes nothing', async () => {
        const { runtime, rows } = setup();
        const key = uniqueKey('orphan');
        const before = (await rows.sagas()).length;
        const result = await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [{ op: 'inc' }, { op: 'send', message: { type: 'X' } }],
        });
        expect(result).toMatchObject({ outcome: 'ignored', reason: 'no-instance', sagaId: null, version: null });
        expect(await rows.saga(key)).toBeNull();
        expect(await rows.sagas()).toHaveLength(before);
        expect(runtime.stats().ignoredNoInstance).toBe(1);
      });

      it('a start message for an existing key uses the existing row and tells the step it is not new', async () => {
        const { runtime, rows } = setup();
        const key = uniqueKey('dup-start');
        const first = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] });
        const second = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] });
        expect(second).toMatchObject({ outcome: 'handled', sagaId: first.sagaId, version: 1 });
        const all = (await rows.sagas()).filter((s) => s.key === key);
        expect(all).toHaveLength(1);
        // The step saw isNew = false and did not write 'started;' again.
        expect(all[0]).toMatchObject({ counter: 2, log: 'started;' });
      });

      it('a completed instance ignores messages unless the definition opts in for their type', async () => {
        const { runtime, rows } = setup();
        const key = uniqueKey('done');
        await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'complete' }] });
        const ignored = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] });
        expect(ignored).toMatchObject({ outcome: 'ignored', reason: 'completed', completed: true, version: 0 });
        expect(runtime.stats().ignoredCompleted).toBe(1);
        // scriptedSaga opts in for 'Do' after completion.
        const late = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: 'late' }] });
        expect(late).toMatchObject({ outcome: 'handled', version: 1, completed: true });
        expect(await rows.saga(key)).toMatchObject({ counter: 0, log: 'started;late;', version: 1 });
        // The late message changed a completed saga; it did not complete it again.
        expect(runtime.stats().completed).toBe(1);
      });

      it('concurrent start messages for one key leave exactly one row', async () => {
        const { runtime, rows } = setup();
        const key = uniqueKey('race');
        const results = await Promise.all(
          Array.from({ length: 10 }, () => runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] })),
        );
        expect(results.filter((r) => r.outcome === 'started')).toHaveLength(1);
        expect(new Set(results.map((r) => r.sagaId)).size).toBe(1);
        const all = (await rows.sagas()).filter((s) => s.key === key);
        expect(all).toHaveLength(1);
        expect(all[0]?.counter).toBe(10);
      });
    });

    describe('the step runs outside any transaction', () => {
      it('a step that throws writes nothing: no state, no timers, no outbox rows', async () => {
        const { runtime, rows } = setup();
        const key = uniqueKey('throw');
        const failing = [
          { op: 'inc' as const },
          { op: 'schedule' as const, name: 't' },
          { op: 'send' as const, message: { type: 'M' } },
          { op: 'throw' as const, message: 'boom' },
        ];
        await expect(runtime.handle(scriptedSaga, { type: 'Start', key, actions: failing })).rejects.toThrow('boom');
        expect(await rows.saga(key)).toBeNull();

        const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
        await expect(runtime.handle(scriptedSaga, { type: 'Do', key, actions: failing })).rejects.toThrow('boom');
        expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });
        expect(await rows.timers({ sagaId: started.sagaId })).toEqual([]);
        expect(await rows.outbox(started.sagaId!)).toEqual([]);
      });

      it('the step holds no connection: the database sees no open transaction while it runs', async () => {
        const orm = db().orm;
        let observed: number | undefined;
        const probe = defineSaga<ScriptedSaga, { type: 'Start'; key: string }>({
          name: 'probe',
          state: ScriptedSaga,
          correlation: { property: 'key', from: (m) => m.key },
          startedBy: ['Start'],
          steps: {
            async Start(saga) {
              // On SQLite the pool has one connection: this query would wait forever if a transaction held it.
              const em = orm.em.fork();
              observed =
                dialect === 'postgresql'
                  ? Number(
                      (
                        await em
                          .getConnection()
                          .execute<{ n: string }[]>(
                            "select count(*) as n from pg_stat_activity where datname = current_database() and state like 'idle in transaction%'",
                          )
                      )[0]?.n,
                    )
                  : 0;
              await em.count(ScriptedSaga);
              saga.counter = 1;
            },
          },
        });
        const runtime = new SagaRuntime({ em: orm.em, sagas: [probe] });
        const result = await runtime.handle(probe, { type: 'Start', key: uniqueKey('probe') });
        expect(result.outcome).toBe('started');
        expect(observed).toBe(0);
      });
    });

    describe('one transaction, and nothing for nothing', () => {
      it('state, timers and outbox rows commit together', async () => {
        const { runtime, rows, clock } = setup();
        const key = uniqueKey('together');
        const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
        const result = await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'inc' },
            { op: 'schedule', name: 'reminder', after: { minutes: 5 } },
            { op: 'send', message: { type: 'Notify', n: 1 }, headers: { tenant: 't1' } },
            { op: 'send', message: { type: 'Notify', n: 2 } },
          ],
        });
        expect(result).toMatchObject({ version: 1, timersScheduled: 1, messagesSent: 2 });
        const timers = await rows.pendingTimers(started.sagaId!);
        expect(timers).toHaveLength(1);
        expect(timers[0]).toMatchObject({
          name: 'reminder',
          sagaType: 'scripted',
          messageType: 'Tick',
          payload: { type: 'Tick', label: 'reminder' },
          attempts: 0,
          step: 'open',
        });
        expect(timers[0]?.dueAt).toEqual(new Date(clock.now().getTime() + 300_000));
        expect(timers[0]?.availableAt).toEqual(timers[0]?.dueAt);
        const outbox = await rows.outbox(started.sagaId!);
        expect(outbox).toHaveLength(2);
        expect(outbox.map((o) => o.payload)).toEqual(
          expect.arrayContaining([
            { type: 'Notify', n: 1 },
            { type: 'Notify', n: 2 },
          ]),
        );
        const first = outbox.find((o) => (o.payload as { n: number }).n === 1);
        expect(first?.headers).toMatchObject({ tenant: 't1', 'saga-type': 'scripted', 'saga-id': started.sagaId });
        expect(first?.headers['correlation-id']).toBe(first?.correlationId);
      });

      it('a step that changes nothing writes nothing: same version, same updated_at', async () => {
        const { runtime, rows, clock } = setup();
        const key = uniqueKey('noop');
        await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'stage', stage: 'waiting' }] });
        const before = await rows.saga(key);
        clock.advance({ minutes: 1 });
        const result = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'stage', stage: 'waiting' }] });
        expect(result).toMatchObject({ outcome: 'handled', changed: false, version: 0, timersScheduled: 0, messagesSent: 0 });
        const after = await rows.saga(key);
        expect(after?.version).toBe(0);
        expect(after?.updatedAt).toEqual(before?.updatedAt);
      });

      it('a changing step bumps the version by one and stamps updated_at from the clock', async () => {
        const { runtime, rows, clock } = setup();
        const key = uniqueKey('bump');
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        clock.advance({ seconds: 30 });
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
        const saga = await rows.saga(key);
        expect(saga).toMatchObject({ version: 2, counter: 2 });
        expect(saga?.updatedAt).toEqual(clock.now());
        expect(saga?.createdAt).toEqual(new Date(clock.now().getTime() - 30_000));
      });

      it('a step that only sends a message writes the outbox row without bumping the version', async () => {
        const { runtime, rows } = setup();
        const key = uniqueKey('send-only');
        const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
        const result = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'send', message: { type: 'Ping' } }] });
        expect(result).toMatchObject({ changed: false, version: 0, messagesSent: 1 });
        expect(await rows.outbox(started.sagaId!)).toHaveLength(1);
        expect((await rows.saga(key))?.version).toBe(0);
      });

      it('a failing timer write rolls back the state change and the outbox rows; the message can be retried', async () => {
        const { runtime, rows } = setup();
        const key = uniqueKey('explode');
        const started = await runtime.handle(scriptedSaga, { type: 'Start', key });
        const allowInserts = await refuseInserts(db().orm, 'saga_timer', 'name', 'explode');
        const message = {
          type: 'Do' as const,
          key,
          actions: [
            { op: 'inc' as const },
            { op: 'send' as const, message: { type: 'Charged' } },
            { op: 'schedule' as const, name: 'explode' },
          ],
        };
        try {
          const error = await runtime.handle(scriptedSaga, message).catch((e: unknown) => e);
          expect(error).toBeInstanceOf(SagaPersistenceError);
          expect(error).toMatchObject({ code: 'PERSISTENCE_FAILED', details: { sagaId: started.sagaId } });
          expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });
          expect(await rows.outbox(started.sagaId!)).toEqual([]);
          expect(await rows.timers({ sagaId: started.sagaId })).toEqual([]);
          // A new instance whose first flush fails leaves no row at all.
          const other = uniqueKey('explode-new');
          await expect(runtime.handle(scriptedSaga, { ...message, type: 'Start', key: other })).rejects.toBeInstanceOf(
            SagaPersistenceError,
          );
          expect(await rows.saga(other)).toBeNull();
        } finally {
          await allowInserts();
        }
        const retried = await runtime.handle(scriptedSaga, message);
        expect(retried).toMatchObject({ version: 1, timersScheduled: 1, messagesSent: 1 });
        expect(await rows.saga(key)).toMatchObject({ version: 1, counter: 1 });
      });
    });
  });
}
