// Two runtimes with group commit (units written together on PostgreSQL, both majors) and two dispatchers on one
// database, many timers due at once plus messages to the same sagas: every timer fires exactly once and every state
// change is applied once.
import type { MikroORM } from '@mikro-orm/core';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaDispatcher, SagaRuntime, silentLogger } from '../../../src/index.js';
import { drainDueTimers, FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

type Msg = { readonly key?: string; readonly inc?: number; readonly schedule?: readonly string[]; readonly cancel?: string } & (
  | { readonly type: 'Start' }
  | { readonly type: 'Do' }
  | { readonly type: 'Tick' }
);

const saga = defineSaga<ScriptedSaga, Msg>({
  name: 'scripted',
  state: ScriptedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Do: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start: (_s, m, ctx) => {
      for (const name of m.schedule ?? []) ctx.schedule(name, 60_000, { type: 'Tick', inc: 1 });
    },
    Do: (s, m, ctx) => {
      s.counter += m.inc ?? 0;
      if (m.cancel) ctx.cancel(m.cancel);
    },
    Tick: (s, m) => {
      s.counter += m.inc ?? 0;
    },
  },
});

describe('dispatchers and runtimes with units written together (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  it('every timer fires exactly once; messages racing them applied once; some groups written together', async () => {
    const clock = new FakeClock();
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [saga], clock });
    const keys = Array.from({ length: 24 }, (_, i) => uniqueKey(`b11-disp-${i}`));
    const names = ['t0', 't1', 't2'];
    for (const key of keys) await plain.handle(saga, { type: 'Start', key, schedule: names });
    const runtimes: SagaRuntime[] = [];
    for (let i = 0; i < 2; i++) {
      const orm = await db().openAnother();
      opened.push(orm);
      runtimes.push(
        new SagaRuntime({
          em: orm.em,
          sagas: [saga],
          clock,
          groupCommit: { maxUnits: 32, maxGroups: 2, lockTimeoutMs: 60_000 },
          concurrency: { baseDelayMs: 0, maxAttempts: 1000 },
        }),
      );
    }
    const dispatchers = runtimes.map(
      (runtime) => new SagaDispatcher({ runtime, clock, logger: silentLogger, concurrency: 16, batchSize: 16 }),
    );
    const sent: string[] = [];
    const original = pg.Client.prototype.query;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      const [query] = args as [string | { text?: string }];
      sent.push(typeof query === 'string' ? query : (query?.text ?? ''));
      return (original as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof original;
    try {
      clock.advance(120_000);
      // A third of the sagas get a message cancelling t2 while the timers fire: that timer fires or is cancelled.
      const cancelled = new Set(keys.filter((_, i) => i % 3 === 0));
      const messages = keys.flatMap((key, i) => [
        runtimes[i % 2]!.handle(saga, { type: 'Do', key, inc: 100, ...(cancelled.has(key) ? { cancel: 't2' } : {}) }),
        runtimes[(i + 1) % 2]!.handle(saga, { type: 'Do', key, inc: 1000 }),
      ]);
      const reports = await Promise.all([...dispatchers.map((d) => drainDueTimers(d)), ...messages]);
      void reports;
      await Promise.all(dispatchers.map((d) => drainDueTimers(d)));
    } finally {
      pg.Client.prototype.query = original;
    }
    const conn = db().orm.em.fork().getConnection();
    for (const key of keys) {
      const row = (await rowsOf(db().orm).saga(key))!;
      const timers: { name: string; outcome: string | null; dispatched_at: Date | null }[] = await conn.execute(
        'select name, outcome, dispatched_at from saga_timer where saga_id = ? order by name',
        [row.id],
      );
      const fired = timers.filter((t) => t.outcome === 'fired').length;
      // Each fired timer adds 1, each message 100 and 1000: exactly once each.
      expect({ key, counter: row.counter }).toEqual({ key, counter: 1100 + fired });
      expect(timers.filter((t) => t.dispatched_at === null)).toEqual([]);
      expect(fired).toBeGreaterThanOrEqual(2);
    }
    const together = sent.filter((sql) => /;\nupdate "scripted_saga"/.test(sql));
    console.log(`joined group strings: ${together.length} of ${sent.length} statements`);
  });
});
