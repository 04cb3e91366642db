// An outbox row another transaction holds locked (an operator's open transaction) when the dispatcher marks its
// delivery started or renews its lease. The start mark waits for the lock, so a saga's messages keep their order; the
// lease renewal does not wait (the row stays held, the others are renewed), and the claim skips a locked row. What
// follows (a takeover once the lock goes, an operator's commit that dead-letters or re-tokens the row) is documented
// (docs/timers.md, "A row another transaction holds locked"). PostgreSQL only. No wall-clock sleeps: FakeClock,
// deferred promises, drainContinuations.
import { describe, expect, it } from 'vitest';
import { type LeaseRenewal, SagaDispatcher, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { lockedOutbox } from '../../support/locked-outbox.js';
import { untilLockWaiters } from '../../support/row-locks.js';
import { deferred, useDatabase } from '../../support/suite.js';

describe('an outbox row another transaction holds locked at its start mark or renewal (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const { operatorSession, dispatcherOn, track, lane, outboxRow, setup } = lockedOutbox(db);

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
    track(dispatcher);

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
    track(dispatcher);
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

  it('the head of a saga lane locked at its start mark: the start mark waits for the lock, the lane keeps its order', {
    timeout: 15_000,
  }, async () => {
    // With `concurrency: 1`, another saga's row X is started by the claim; the lane of saga S (A, B, C) waits. The
    // operator locks A while X is published. A start mark that skipped A (busy) would let it go and the lane go on:
    // the broker would see X, B, C, A.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const [x] = await lane(clock, 'X');
    const [a, b, c] = await lane(clock, 'A', 'B', 'C');
    const ours = [x, a, b, c];
    const published: string[] = [];
    const { dispatcher } = dispatcherOn(
      db().orm,
      clock,
      async (envelope) => {
        if (ours.includes(envelope.id)) published.push(envelope.type);
        if (envelope.id === x) await operator.lock(a!);
      },
      { concurrency: 1 },
    );
    const pass = dispatcher.runOnce();
    await untilLockWaiters(db().orm);
    expect(published).toEqual(['X']);
    await operator.rollback();
    expect((await pass).outbox).toMatchObject({ claimed: 4, published: 4, released: 0 });
    expect(await outboxRow(a!)).toMatchObject({ outcome: 'published', attempts: 0 });
    expect([b, c].length).toBe(2);
    expect(published).toEqual(['X', 'A', 'B', 'C']);
  });

  it('a middle row of a lane locked at its start mark: the start mark waits, the saga’s messages go out in order', {
    timeout: 15_000,
  }, async () => {
    // With the lane's head started by the claim (default concurrency), A is published; the operator locks B
    // meanwhile. A start mark that skipped B would publish C in the same pass: A, C, B.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const ours = await lane(clock, 'A', 'B', 'C');
    const [a, b] = ours;
    const published: string[] = [];
    const { dispatcher } = dispatcherOn(db().orm, clock, async (envelope) => {
      if (ours.includes(envelope.id)) published.push(envelope.type);
      if (envelope.id === a) await operator.lock(b!);
    });
    const pass = dispatcher.runOnce();
    await untilLockWaiters(db().orm);
    await operator.rollback();
    expect((await pass).outbox).toMatchObject({ claimed: 3, published: 3, released: 0, failed: 0 });
    expect(await outboxRow(b!)).toMatchObject({ outcome: 'published', attempts: 0, lastError: null });
    expect(published).toEqual(['A', 'B', 'C']);
  });

  it('the head of a lane locked before the claim: the claim skips it and publishes the rest of its lane first (documented)', async () => {
    // Documented in docs/timers.md: the claim's pick skips the locked head A
    // (`for update skip locked`) and claims B and C of the same saga; B is the lane's head in the batch, started at
    // claim, and both are published before A, which goes out at the first pass after the lock is gone.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const ours = await lane(clock, 'A', 'B', 'C');
    await operator.lock(ours[0]!);
    const published: string[] = [];
    const { dispatcher } = dispatcherOn(db().orm, clock, async (envelope) => {
      if (ours.includes(envelope.id)) published.push(envelope.type);
    });
    await dispatcher.runOnce();
    await operator.rollback();
    await dispatcher.runOnce();
    expect(published).toEqual(['B', 'C', 'A']);
  });

  it('a queued row busy at every renewal behind a long delivery: a second dispatcher takes it over once the lock goes (documented)', async () => {
    // Documented (docs/timers.md, "A row another transaction holds locked"): a renewal that waited for the lock would
    // hold up the renewal of every other held row. Saga S sends A then B; D1 claims both, A is started by the claim
    // and its publish runs 45 s (within deliveryTimeoutMs); B waits in A's lane. The operator locks B at once: every renewal reports B busy ("stays
    // held") but its lease (claim + 30 s) is not extended. The operator ends the transaction at 40 s; before D1's next
    // renewal (at 50 s) D2's claim takes B: never started, so free, at once. D2 publishes B while D1 is still
    // publishing A: the saga's messages out of order, and the row D1 "holds" is taken by another dispatcher although
    // the lock outlasted only the lease (docs: only a lock outlasting the lease AND deliveryTimeoutMs lets another
    // dispatcher take a row over; a queued row behind a long delivery "is not taken by a second dispatcher").
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const [a, b] = await lane(clock, 'A', 'B');
    const publishing = deferred();
    const release = deferred();
    const published: string[] = [];
    const d1 = dispatcherOn(db().orm, clock, async (envelope) => {
      if (envelope.id === a || envelope.id === b) published.push(`D1:${envelope.type}`);
      if (envelope.id === a) {
        publishing.resolve();
        await release.promise;
      }
    });
    const other = await db().openAnother();
    const d2 = dispatcherOn(other, clock, async (envelope) => {
      if (envelope.id === a || envelope.id === b) published.push(`D2:${envelope.type}`);
    });
    const renewals: LeaseRenewal[] = [];
    d1.dispatcher.on('renewed', (renewal) => void renewals.push(renewal));

    const pass = d1.dispatcher.runOnce();
    await publishing.promise;
    await operator.lock(b!);
    for (let n = 1; n <= 4; n++) {
      const renewed = new Promise<void>((resolve) => d1.dispatcher.on('renewed', () => resolve()));
      clock.advance(10_000);
      await renewed;
      if (n === 4) break;
    }
    // Holds: B reported busy, not lost, at each renewal; A renewed.
    for (const renewal of renewals) expect(renewal).toMatchObject({ lost: [], busy: [b!], renewed: [a!] });
    await operator.rollback(); // at 40 s: within leaseMs + deliveryTimeoutMs of the claim
    const byD2 = (await d2.dispatcher.runOnce()).outbox;
    release.resolve();
    const byD1 = (await pass).outbox;
    expect(await outboxRow(b!)).toMatchObject({ outcome: 'published' });
    // B is published once, by D2, while A's publish was running; D1 finds it lost.
    expect({ byD2: byD2.claimed, published }).toEqual({ byD2: 1, published: ['D1:A', 'D2:B'] });
    expect(byD1).toMatchObject({ published: 1, lost: 1 });
  });

  it('a started row busy at several renewals, delivery longer than the lease: no takeover, stamped once, uncharged', async () => {
    // Holds: the lease lapses under the lock, but a second dispatcher leaves a started row alone for
    // deliveryTimeoutMs; D1's next renewal, then its stamp, find it once the lock is gone.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const [a] = await lane(clock, 'A');
    const publishing = deferred();
    const release = deferred();
    const published: string[] = [];
    const d1 = dispatcherOn(db().orm, clock, async (envelope) => {
      if (envelope.id !== a) return;
      published.push(`D1:${envelope.type}`);
      publishing.resolve();
      await release.promise;
    });
    const other = await db().openAnother();
    const d2 = dispatcherOn(other, clock, async (envelope) => {
      if (envelope.id === a) published.push(`D2:${envelope.type}`);
    });
    const renewals: LeaseRenewal[] = [];
    d1.dispatcher.on('renewed', (renewal) => void renewals.push(renewal));
    const pass = d1.dispatcher.runOnce();
    await publishing.promise;
    await operator.lock(a!);
    for (let n = 1; n <= 4; n++) {
      const renewed = new Promise<void>((resolve) => d1.dispatcher.on('renewed', () => resolve()));
      clock.advance(10_000);
      await renewed;
    }
    await operator.rollback();
    expect((await d2.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 0 });
    const renewed = new Promise<void>((resolve) => d1.dispatcher.on('renewed', () => resolve()));
    clock.advance(10_000); // 50 s: renewed again
    await renewed;
    expect(renewals.at(-1)).toMatchObject({ renewed: [a!], lost: [] });
    release.resolve();
    expect((await pass).outbox).toMatchObject({ published: 1, failed: 0 });
    clock.advance(20_000); // 70 s: past deliveryTimeoutMs of the start
    expect((await d2.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 0 });
    expect(await outboxRow(a!)).toMatchObject({ outcome: 'published', attempts: 0, lastError: null });
    expect(published).toEqual(['D1:A']);
  });

  it('the operator dead-letters a row whose start mark waits for it and commits: never published, not claimed again', async () => {
    // Holds (the start mark waits for the operator's transaction, then finds the row no longer pending: lost).
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const [a, b] = await lane(clock, 'A', 'B');
    const published: string[] = [];
    const { dispatcher } = dispatcherOn(db().orm, clock, async (envelope) => {
      if (envelope.id === a || envelope.id === b) published.push(envelope.type);
      if (envelope.id === a) {
        await operator.run(
          `update "saga_outbox" set "dispatched_at" = now(), "outcome" = 'dead_lettered', "dead_lettered_at" = now(),
             "dead_letter_reason" = 'operator', "locked_until" = null where "id" = ?`,
          [b!],
        );
      }
    });
    const pass = dispatcher.runOnce();
    await untilLockWaiters(db().orm);
    await operator.commit();
    expect((await pass).outbox).toMatchObject({ published: 1, lost: 1 });
    clock.advance(31_000);
    expect((await dispatcher.runOnce()).outbox).toMatchObject({ claimed: 0 });
    expect(await outboxRow(b!)).toMatchObject({ outcome: 'dead_lettered', deadLetterReason: 'operator', attempts: 0 });
    expect(published).toEqual(['A']);
  });

  it('the operator changes a queued busy row’s token and commits: the next renewal reports it lost, not published here', async () => {
    // Holds.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const [a, b] = await lane(clock, 'A', 'B');
    const publishing = deferred();
    const release = deferred();
    const published: string[] = [];
    const { dispatcher } = dispatcherOn(db().orm, clock, async (envelope) => {
      if (envelope.id === a || envelope.id === b) published.push(envelope.type);
      if (envelope.id === a) {
        publishing.resolve();
        await release.promise;
      }
    });
    const renewals: LeaseRenewal[] = [];
    dispatcher.on('renewed', (renewal) => void renewals.push(renewal));
    const pass = dispatcher.runOnce();
    await publishing.promise;
    await operator.run('update "saga_outbox" set "token" = gen_random_uuid(), "locked_until" = null where "id" = ?', [b!]);
    let renewed = new Promise<void>((resolve) => dispatcher.on('renewed', () => resolve()));
    clock.advance(10_000);
    await renewed;
    expect(renewals[0]).toMatchObject({ busy: [b!], lost: [] });
    await operator.commit();
    renewed = new Promise<void>((resolve) => dispatcher.on('renewed', () => resolve()));
    clock.advance(10_000);
    await renewed;
    expect(renewals[1]).toMatchObject({ lost: [b!] });
    release.resolve();
    expect((await pass).outbox).toMatchObject({ published: 1, lost: 1 });
    expect(published).toEqual(['A']);
  });
});
