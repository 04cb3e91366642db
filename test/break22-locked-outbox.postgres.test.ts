// break22: attacks on the outbox start mark and lease renewal that skip a row another transaction holds locked
// (14009d3). PostgreSQL only. No wall-clock sleeps: FakeClock, deferred promises, drainContinuations.
import type { MikroORM, Transaction } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type DispatchPassResult, type LeaseRenewal, type OutboxEnvelope, SagaDispatcher, SagaRuntime } from '../src/index.js';
import { FakeClock } from '../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from './fixtures/scripted-saga.js';
import { drainContinuations } from './support/flush-hold.js';
import { rowsOf } from './support/rows.js';
import { deferred, uniqueKey, useDatabase } from './support/suite.js';

describe('break22: an outbox row another transaction holds locked at its start mark or renewal (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const cleanup: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step().catch(() => undefined);
  });

  /** An operator's session on its own MikroORM instance: one open transaction at a time. */
  async function operatorSession() {
    const orm = await db().openAnother();
    const connection = orm.em.getConnection();
    let trx: Transaction | undefined;
    const begin = async () => {
      trx ??= await connection.begin();
      return trx;
    };
    const session = {
      lock: async (...ids: string[]) => {
        const t = await begin();
        for (const id of ids) await connection.execute('select 1 from "saga_outbox" where "id" = ? for update', [id], 'all', t);
      },
      run: async (sql: string, params: unknown[]) => connection.execute(sql, params, 'all', await begin()),
      rollback: async () => {
        if (trx) await connection.rollback(trx);
        trx = undefined;
      },
      commit: async () => {
        if (trx) await connection.commit(trx);
        trx = undefined;
      },
    };
    cleanup.push(() => session.rollback());
    return session;
  }

  function dispatcherOn(
    orm: MikroORM,
    clock: FakeClock,
    publish: (envelope: OutboxEnvelope) => Promise<void>,
    extra: Partial<ConstructorParameters<typeof SagaDispatcher>[0]> = {},
  ) {
    const lines: string[] = [];
    const dispatcher = new SagaDispatcher({
      runtime: new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock }),
      clock,
      logger: {
        debug: () => undefined,
        info: () => undefined,
        warn: (line) => void lines.push(`warn: ${line}`),
        error: (line) => void lines.push(`error: ${line}`),
      },
      publish,
      ...extra,
    });
    cleanup.push(() => dispatcher.stop());
    return { dispatcher, lines };
  }

  /** A saga that sends `types` in order, one step each, 1 s apart: one lane. Returns the rows' ids in that order. */
  async function lane(clock: FakeClock, ...types: string[]): Promise<string[]> {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const key = uniqueKey('b22');
    let sagaId: string | undefined;
    for (const [index, type] of types.entries()) {
      const result = await runtime.handle(scriptedSaga, {
        type: index === 0 ? 'Start' : 'Do',
        key,
        actions: [{ op: 'send', message: { type } }],
      });
      sagaId ??= result.sagaId!;
      clock.advance(1_000);
    }
    const rows = await rowsOf(db().orm).outbox(sagaId!);
    return types.map((type) => rows.find((row) => row.messageType === type)!.id);
  }

  async function outboxRow(id: string) {
    const rows = await rowsOf(db().orm).outbox();
    return rows.find((row) => row.id === id)!;
  }

  it('the head of a saga lane locked at its start mark: its later rows are published before it', { timeout: 15_000 }, async () => {
    // FINDING: with `concurrency: 1`, another saga's row X is started by the claim; the lane of saga S (A, B, C) waits.
    // The operator locks A while X is published. A's start mark is busy: A is let go (released), and the lane goes
    // on: B and C get their start marks and are published in this pass, A only after its lease (next pass). The
    // broker sees B, C, A. Before 14009d3 A's start mark waited for the lock and the lane kept its order; a busy row
    // is not a failed delivery, yet it reorders its saga's messages like one (docs/timers.md says nothing of it).
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
    const first = (await dispatcher.runOnce()).outbox;
    await operator.rollback();
    clock.advance(31_000);
    await dispatcher.runOnce();
    await dispatcher.runOnce();
    expect(await outboxRow(a!)).toMatchObject({ outcome: 'published', attempts: 0 });
    expect([b, c].length).toBe(2);
    // What happens now: first = { claimed: 4, published: 3, released: 1 }, published = X, B, C, A.
    expect({ first: first.published, order: published }).toEqual({ first: 1, order: ['X', 'A', 'B', 'C'] });
  });

  it('a middle row of a lane locked at its start mark: the row after it is published before it', { timeout: 15_000 }, async () => {
    // FINDING: same as above with the lane's head started by the claim (default concurrency): A is published; the
    // operator locks B meanwhile; B is released and C published in the same pass. The saga's messages go out A, C, B.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const ours = await lane(clock, 'A', 'B', 'C');
    const [a, b] = ours;
    const published: string[] = [];
    const { dispatcher, lines } = dispatcherOn(db().orm, clock, async (envelope) => {
      if (ours.includes(envelope.id)) published.push(envelope.type);
      if (envelope.id === a) await operator.lock(b!);
    });
    const first = (await dispatcher.runOnce()).outbox;
    // Holds: counted released, logged with the row's id, uncharged.
    expect(first).toMatchObject({ claimed: 3, released: 1, failed: 0 });
    expect(lines.filter((line) => line.includes('holds its row locked; not delivered now'))).toEqual([expect.stringContaining(b!)]);
    expect(await outboxRow(b!)).toMatchObject({ outcome: null, attempts: 0, deliveryStartedAt: null, lastError: null });
    await operator.rollback();
    clock.advance(31_000);
    await dispatcher.runOnce();
    expect(await outboxRow(b!)).toMatchObject({ outcome: 'published', attempts: 0, lastError: null });
    expect(published).toEqual(['A', 'B', 'C']);
  });

  it('the head of a lane locked before the claim: the claim takes and publishes the rest of its lane', { timeout: 15_000 }, async () => {
    // FINDING (the claim, not new in 14009d3): the claim's pick skips the locked head A (`for update skip locked`) and
    // claims B and C of the same saga; B is the lane's head in the batch, started at claim, and both are published
    // before A. docs/timers.md: "a row locked before it is claimed waits until the lock is gone" — its saga's later
    // messages do not wait with it.
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
    expect(published).toEqual(['A', 'B', 'C']);
  });

  it('the loop: a row released at a busy start mark is not charged, the loop goes on, delivered once after lock and lease', async () => {
    // Holds.
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const operator = await operatorSession();
    const [x] = await lane(clock, 'LX');
    const [y] = await lane(clock, 'LY');
    const published: string[] = [];
    const { dispatcher, lines } = dispatcherOn(
      db().orm,
      clock,
      async (envelope) => {
        published.push(envelope.id);
        if (envelope.id === x) await operator.lock(y!);
      },
      { concurrency: 1, pollIntervalMs: 5_000 },
    );
    const passes: DispatchPassResult[] = [];
    dispatcher.on('pass', (result) => void passes.push(result));
    let idle = new Promise<void>((resolve) => void dispatcher.on('idle', resolve));
    const nextIdle = () => {
      idle = new Promise<void>((resolve) => void dispatcher.on('idle', resolve));
    };
    dispatcher.start();
    await idle;
    const total = (key: 'claimed' | 'published' | 'released' | 'failed' | 'lost') => passes.reduce((n, p) => n + p.outbox[key], 0);
    // The first pass may be reported after the next one (its stamps written behind): totals.
    expect({ claimed: total('claimed'), published: total('published'), released: total('released'), failed: total('failed') }).toEqual({
      claimed: 2,
      published: 1,
      released: 1,
      failed: 0,
    });
    // The lock outlasts the lease: the loop keeps going, other rows published, the locked one not.
    const others: string[] = [];
    for (let round = 0; round < 10; round++) {
      const [other] = await lane(clock, `LO${round}`);
      others.push(other!);
      nextIdle();
      clock.advance(5_000);
      await idle;
      expect(await outboxRow(other!)).toMatchObject({ outcome: 'published' });
      expect(await outboxRow(y!)).toMatchObject({ outcome: null, attempts: 0, deliveryStartedAt: null });
    }
    await operator.rollback();
    nextIdle();
    clock.advance(5_000);
    await idle;
    await drainContinuations();
    expect(await outboxRow(y!)).toMatchObject({ outcome: 'published', attempts: 0, lastError: null, lockedUntil: null });
    await dispatcher.stop();
    const ours = new Set([x!, y!, ...others]);
    expect(published.filter((id) => ours.has(id)).sort()).toEqual([...ours].sort());
    expect(lines.filter((line) => line.includes(y!))).toHaveLength(1);
    expect({ released: total('released'), failed: total('failed'), lost: total('lost') }).toEqual({ released: 1, failed: 0, lost: 0 });
  });

  it('a queued row busy at every renewal behind a long delivery: a second dispatcher takes it over once the lock goes', {
    timeout: 15_000,
  }, async () => {
    // FINDING: saga S sends A then B; D1 claims both, A is started by the claim and its publish runs 45 s (within
    // deliveryTimeoutMs); B waits in A's lane. The operator locks B at once: every renewal reports B busy ("stays
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
    // What happens now: byD2.claimed = 1, published = D1:A, D2:B with B published while A's publish was running.
    expect({ byD2: byD2.claimed, published }).toEqual({ byD2: 0, published: ['D1:A', 'D1:B'] });
    expect(byD1).toMatchObject({ published: 2 });
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

  it('the operator dead-letters a row busy at its start mark and commits: never published, not claimed again', async () => {
    // Holds.
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
    expect((await dispatcher.runOnce()).outbox).toMatchObject({ published: 1, released: 1 });
    await operator.commit();
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
