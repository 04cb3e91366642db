// An outbox row the dispatcher has published, locked by another transaction before its published stamp is written
// (an operator's open transaction in psql or a GUI client, an UPDATE of the row left uncommitted). The stamp does
// not wait for that lock: it was written with `for update`, and the pass, then every later pass of the loop (which
// waits for the stamps of the pass before), waited as long as the operator's transaction stayed open. Now the row
// is reported busy, kept, and stamped at the first pass after the lock is gone; other rows go on meanwhile.
// PostgreSQL only: SQLite has no row locks (a writer takes the database's one write lock, bounded by the busy timeout).
import { afterEach, describe, expect, it } from 'vitest';
import { type LeaseRenewal, type OutboxEnvelope, SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { operatorSession, untilLockWaiters } from '../support/row-locks.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

describe('a published row another transaction holds locked (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const dispatchers: SagaDispatcher[] = [];
  afterEach(async () => {
    for (const dispatcher of dispatchers.splice(0)) await dispatcher.stop();
  });

  /** A runtime on a fake clock, a starter of sagas that each send one message, and an operator's session. */
  const setup = async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const start = async (message: string) => {
      const result = await runtime.handle(scriptedSaga, {
        type: 'Start',
        key: uniqueKey('lk'),
        actions: [{ op: 'send', message: { type: message } }],
      });
      clock.advance(1_000); // claimed oldest first
      return result.sagaId!;
    };
    const operator = operatorSession(await db().openAnother());
    return { clock, runtime, start, lockRow: (id: string) => operator.lock(id), unlock: () => operator.rollback(), rows: rowsOf(db().orm) };
  };

  it('does not hold up the pass or later ones: stamped once the lock is gone, published once, not charged', async () => {
    const { clock, runtime, start, lockRow, unlock, rows } = await setup();
    const published: OutboxEnvelope[] = [];
    const warnings: string[] = [];
    const dispatcher = new SagaDispatcher({
      runtime,
      clock,
      logger: {
        debug: () => undefined,
        info: () => undefined,
        warn: (line) => void warnings.push(line),
        error: (line) => void warnings.push(line),
      },
      publish: async (envelope) => {
        published.push(envelope);
        if (envelope.type !== 'Locked') return;
        // The broker took it; now an operator's transaction locks its row and stays open.
        await lockRow(envelope.id);
      },
    });
    dispatchers.push(dispatcher);
    const locked = await start('Locked');

    expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 1, published: 1, failed: 0 });
    expect(await rows.outbox(locked)).toMatchObject([{ outcome: null, attempts: 0, dispatchedAt: null }]);
    expect(warnings).toEqual([
      expect.stringMatching(/was published, but another transaction holds its row locked; it is stamped at a later pass/),
    ]);

    // While the lock is held, other messages are published and stamped; the locked one is neither published again
    // nor claimed again, even once its lease has run out.
    const other = await start('Other');
    clock.advance(120_000);
    expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 1, published: 1 });
    expect(await rows.outbox(other)).toMatchObject([{ outcome: 'published', attempts: 0 }]);
    expect(await rows.outbox(locked)).toMatchObject([{ outcome: null, attempts: 0 }]);

    await unlock();
    expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 0 });
    expect(await rows.outbox(locked)).toMatchObject([{ outcome: 'published', attempts: 0, lastError: null, lockedUntil: null }]);
    expect(published.map((envelope) => envelope.type)).toEqual(['Locked', 'Other']);
  });

  it('a row locked before its delivery starts: its start mark waits for the lock (messages of a saga keep their order)', async () => {
    const { clock, runtime, start, lockRow, unlock, rows } = await setup();
    const first = await start('First');
    const second = await start('Second');
    const [secondRow] = await rows.outbox(second);
    const published: string[] = [];
    // One delivery at a time: the claim marks the first row started; the second row's start mark waits for the slot.
    const dispatcher = new SagaDispatcher({
      runtime,
      clock,
      concurrency: 1,
      logger: silentLogger,
      publish: async (envelope) => {
        published.push(envelope.type);
        if (envelope.type === 'First') await lockRow(secondRow!.id);
      },
    });
    dispatchers.push(dispatcher);

    const pass = dispatcher.runOnce();
    await untilLockWaiters(db().orm);
    expect(published).toEqual(['First']);
    expect(await rows.outbox(second)).toMatchObject([{ outcome: null, deliveryStartedAt: null }]);
    await unlock();
    expect((await pass).outbox).toMatchObject({ claimed: 2, published: 2, released: 0, failed: 0 });
    expect(await rows.outbox(first)).toMatchObject([{ outcome: 'published' }]);
    expect(await rows.outbox(second)).toMatchObject([{ outcome: 'published', attempts: 0, lastError: null }]);
    expect(published).toEqual(['First', 'Second']);
  });

  it('a lease renewal does not wait for a locked row: the row stays held, the others are renewed', async () => {
    const { clock, runtime, start, lockRow, unlock, rows } = await setup();
    const slow = await start('Slow');
    const other = await start('Other');
    const [slowRow] = await rows.outbox(slow);
    const publishing = deferred();
    const release = deferred();
    const published: string[] = [];
    const dispatcher = new SagaDispatcher({
      runtime,
      clock,
      logger: silentLogger,
      publish: async (envelope) => {
        published.push(envelope.type);
        publishing.resolve();
        await release.promise; // both deliveries run until released
      },
    });
    dispatchers.push(dispatcher);
    const renewals: LeaseRenewal[] = [];
    dispatcher.on('renewed', (renewal) => void renewals.push(renewal));

    const pass = dispatcher.runOnce();
    await publishing.promise;
    await lockRow(slowRow!.id);
    const renewed = new Promise<void>((resolve) => dispatcher.on('renewed', () => resolve()));
    clock.advance(10_000); // leaseMs / 3: the lease keeper renews
    await renewed;
    expect(renewals).toHaveLength(1);
    expect(renewals[0]).toMatchObject({ table: 'saga_outbox', lost: [], busy: [slowRow!.id] });
    expect(renewals[0]!.renewed).toHaveLength(1);

    release.resolve();
    expect((await pass).outbox).toMatchObject({ claimed: 2, published: 2, failed: 0 });
    expect(await rows.outbox(other)).toMatchObject([{ outcome: 'published' }]);
    expect(await rows.outbox(slow)).toMatchObject([{ outcome: null, attempts: 0 }]); // its stamp kept: still locked
    await unlock();
    await dispatcher.runOnce();
    expect(await rows.outbox(slow)).toMatchObject([{ outcome: 'published', attempts: 0, lastError: null }]);
    expect(published.sort()).toEqual(['Other', 'Slow']);
  });
});
