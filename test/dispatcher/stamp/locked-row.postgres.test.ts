// An outbox row the dispatcher has published, locked by another transaction before its published stamp is written
// (an operator's open transaction in psql or a GUI client, an UPDATE of the row left uncommitted). The stamp does not
// wait for that lock (a pass, and every later pass of the loop, would wait as long as the transaction stays open): the
// row is reported busy, its stamp kept and written at the first pass after the lock is gone, checked by its token;
// other rows go on meanwhile. The trade-offs are documented (docs/timers.md, "A row another transaction holds
// locked"). PostgreSQL only: SQLite has no row locks (a writer takes the database's one write lock, bounded by the
// busy timeout). No wall-clock sleeps: FakeClock, deferred promises, drainContinuations.
import { describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { drainContinuations } from '../../support/flush-hold.js';
import { lockedOutbox, PAYLOAD_SECRET } from '../../support/locked-outbox.js';
import { statementsSent } from '../../support/pg-statements.js';
import { deferred, useDatabase } from '../../support/suite.js';

describe('a published row another transaction holds locked at its stamp (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const { operatorSession, dispatcherOn, track, send, outboxRow, setup } = lockedOutbox(db);

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
    track(dispatcher);
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

  it('two dispatchers: the lock outlasts the lease and deliveryTimeoutMs, then goes; the other dispatcher publishes the row again and charges it', async () => {
    // The documented trade-off (docs/timers.md, "A row another transaction holds locked"): nothing can write a row
    // while another transaction holds it locked, its lease included. The other rows go on, and a lock that outlasts
    // the lease and deliveryTimeoutMs lets another dispatcher take the row over once it goes. A row kept "busy" is
    // protected from other dispatchers only by the operator's lock itself: its lease
    // is let go (leases.let once the stamp promise settles) and never renewed, and delivery_started_at stays set.
    // Once the lock has outlived leaseMs and deliveryTimeoutMs, the moment it goes a second dispatcher's claim
    // (before the first dispatcher's next pass, up to pollIntervalMs later in the loop) takes the row over: the
    // message is published a second time and the row is charged a lost delivery (attempts 1, 'LeaseExpired: ...'),
    // though its only delivery succeeded. docs/timers.md promises "published once, not charged, not claimed again
    // meanwhile (the dispatcher holds it)".
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const published: string[] = [];
    const a = dispatcherOn(db().orm, clock, async (envelope) => {
      published.push(`A:${envelope.type}`);
      if (envelope.type === 'Locked') await operator.lock(envelope.id);
    });
    const other = await db().openAnother();
    const b = dispatcherOn(other, clock, async (envelope) => void published.push(`B:${envelope.type}`));
    const id = await send(clock, 'Locked');

    expect((await a.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 1, published: 1 });
    clock.advance(30_000 + 60_000 + 1_000); // past leaseMs and deliveryTimeoutMs (defaults)
    // While the lock is held, B's claim skips the row (pinned: holds).
    expect((await b.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 0 });

    await operator.rollback();
    // B's pass comes before A's next one.
    const byB = (await b.dispatcher.runOnce()).outbox;
    await a.dispatcher.runOnce();
    const row = await outboxRow(id);
    expect({ byB: byB.claimed, published, attempts: row.attempts, lastError: row.lastError, outcome: row.outcome }).toEqual({
      byB: 1,
      published: ['A:Locked', 'B:Locked'],
      attempts: 1,
      lastError: expect.stringMatching(/^LeaseExpired:/),
      outcome: 'published',
    });
  });

  it('token check holds: a row the other dispatcher took over is not stamped by the old dispatcher’s kept stamp', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const a = dispatcherOn(db().orm, clock, async (envelope) => {
      if (envelope.type === 'Locked') await operator.lock(envelope.id);
    });
    const bPublishing = deferred();
    const bRelease = deferred();
    const other = await db().openAnother();
    const b = dispatcherOn(other, clock, async () => {
      bPublishing.resolve();
      await bRelease.promise;
    });
    const id = await send(clock, 'Locked');
    await a.dispatcher.runOnce();
    clock.advance(100_000);
    await operator.rollback();

    const bPass = b.dispatcher.runOnce();
    await bPublishing.promise;
    const underB = await outboxRow(id);
    // A's kept stamp runs while B holds the row under its new token: it must not stamp it.
    await a.dispatcher.runOnce();
    const afterA = await outboxRow(id);
    expect(afterA).toMatchObject({ dispatchedAt: null, outcome: null, token: underB.token });
    bRelease.resolve();
    expect((await bPass).outbox).toMatchObject({ claimed: 1, published: 1 });
    expect(await outboxRow(id)).toMatchObject({ outcome: 'published' });
    // A forgot it: a later pass of A does not touch the row again.
    expect((await a.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 0 });
  });

  it('stop() while the row is still locked: resolves, but says nothing of the published row it leaves unstamped', async () => {
    // stop() writes the kept outcomes once; a busy one stays kept. Once the lock goes, any dispatcher may re-claim that
    // row after leaseMs + deliveryTimeoutMs, publish it again and charge it a lost delivery: stop() must say, by id,
    // which published row it leaves behind unstamped.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const a = dispatcherOn(db().orm, clock, async (envelope) => {
      if (envelope.type === 'Locked') await operator.lock(envelope.id);
    });
    const id = await send(clock, 'Locked');
    a.dispatcher.start();
    while ((await outboxRow(id)).deliveryStartedAt === null || a.lines.length === 0) await drainContinuations();
    const before = a.lines.length;
    await a.dispatcher.stop(); // completes (holds)
    expect(a.dispatcher.running).toBe(false);
    expect(await outboxRow(id)).toMatchObject({ outcome: null, dispatchedAt: null });
    const atStop = a.lines.slice(before);
    expect(atStop).toContainEqual(expect.stringContaining(id));
  });

  it('the loop stays live over many passes while the row stays locked past its lease; stamped once the lock goes', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const published: string[] = [];
    const a = dispatcherOn(
      db().orm,
      clock,
      async (envelope) => {
        published.push(envelope.id);
        if (envelope.type === 'LoopLocked') await operator.lock(envelope.id);
      },
      { pollIntervalMs: 10_000 },
    );
    const nextIdle = () => new Promise<void>((resolve) => void a.dispatcher.on('idle', resolve));
    const locked = await send(clock, 'LoopLocked');
    let idle = nextIdle();
    a.dispatcher.start();
    await idle;
    expect(await outboxRow(locked)).toMatchObject({ outcome: null });
    const others: string[] = [];
    for (let round = 0; round < 8; round++) {
      const other = await send(clock, `Other${round}`);
      others.push(other);
      idle = nextIdle();
      clock.advance(10_000);
      await idle;
      expect(await outboxRow(other)).toMatchObject({ outcome: 'published', attempts: 0 });
      expect(await outboxRow(locked)).toMatchObject({ outcome: null, attempts: 0 });
    }
    await operator.rollback();
    idle = nextIdle();
    clock.advance(10_000);
    await idle;
    expect(await outboxRow(locked)).toMatchObject({ outcome: 'published', attempts: 0, lastError: null, lockedUntil: null });
    await a.dispatcher.stop();
    // Each of this test's messages once (a row an earlier test's stop() left unstamped may be published here too).
    const ours = new Set([locked, ...others]);
    expect(published.filter((p) => ours.has(p)).sort()).toEqual([...ours].sort());
    expect(a.lines.filter((line) => line.includes('holds its row locked'))).toEqual([expect.stringContaining(locked)]);
    for (const line of a.lines) expect(line).not.toContain(PAYLOAD_SECRET);
  });

  it('a whole batch locked: every row kept, other rows go on, all stamped once the lock goes, each published once', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const ids = [await send(clock, 'L0'), await send(clock, 'L1'), await send(clock, 'L2')];
    let locking: Promise<void> | undefined;
    const published: string[] = [];
    const a = dispatcherOn(db().orm, clock, async (envelope) => {
      published.push(envelope.id);
      if (ids.includes(envelope.id)) {
        locking ??= operator.lock(...ids);
        await locking;
      }
    });
    expect((await a.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 3, published: 3 });
    for (const id of ids) expect(await outboxRow(id)).toMatchObject({ outcome: null });
    const other = await send(clock, 'Other');
    clock.advance(100_000);
    expect((await a.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 1, published: 1 });
    expect(await outboxRow(other)).toMatchObject({ outcome: 'published' });
    await operator.rollback();
    expect((await a.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 0 });
    for (const id of ids) expect(await outboxRow(id)).toMatchObject({ outcome: 'published', attempts: 0 });
    expect([...published].sort()).toEqual([...ids, other].sort());
  });

  it('the operator’s transaction updates the row (reschedules it) and commits: the kept stamp stamps it published', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const a = dispatcherOn(db().orm, clock, async (envelope) => {
      await operator.run('update "saga_outbox" set "available_at" = "available_at" + interval \'1 hour\' where "id" = ?', [envelope.id]);
    });
    const id = await send(clock, 'Locked');
    await a.dispatcher.runOnce();
    expect(await outboxRow(id)).toMatchObject({ outcome: null });
    await operator.commit();
    await a.dispatcher.runOnce();
    expect(await outboxRow(id)).toMatchObject({ outcome: 'published', attempts: 0 });
  });

  it('the operator’s transaction dead-letters the row and commits: the kept stamp leaves it dead-lettered', async () => {
    // Holds: the kept stamp finds the row no longer pending, drops it (no further log) and leaves the operator's
    // dead-letter as written.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const a = dispatcherOn(db().orm, clock, async (envelope) => {
      await operator.run(
        `update "saga_outbox" set "dispatched_at" = now(), "outcome" = 'dead_lettered', "dead_lettered_at" = now(),
           "dead_letter_reason" = 'operator', "locked_until" = null where "id" = ?`,
        [envelope.id],
      );
    });
    const id = await send(clock, 'Locked');
    await a.dispatcher.runOnce();
    await operator.commit();
    await a.dispatcher.runOnce();
    expect(await outboxRow(id)).toMatchObject({ outcome: 'dead_lettered', deadLetterReason: 'operator' });
    expect(a.lines.filter((line) => line.includes(id))).not.toContainEqual(expect.stringContaining('may be published again'));
    expect((await a.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 0 });
  });

  it('many kept rows: each later pass writes their stamps in one statement, not one per row', async () => {
    // Kept stamps are written together, as the rows published together are: one statement per row would cost every
    // pass a round trip per kept row while the lock is held, before it claims anything.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const ids: string[] = [];
    for (let n = 0; n < 20; n++) ids.push(await send(clock, `L${n}`));
    let locking: Promise<void> | undefined;
    const a = dispatcherOn(
      db().orm,
      clock,
      async () => {
        locking ??= operator.lock(...ids);
        await locking;
      },
      { concurrency: 20 },
    );
    expect((await a.dispatcher.runOnce()).outbox).toMatchObject({ claimed: 20, published: 20 });
    clock.advance(1_000);
    const sent = await statementsSent(() => a.dispatcher.runOnce());
    const stamps = sent.filter((sql) => /^\s*update "saga_outbox" set "dispatched_at"/.test(sql));
    expect(stamps.length).toBeLessThanOrEqual(1);
  });
});
