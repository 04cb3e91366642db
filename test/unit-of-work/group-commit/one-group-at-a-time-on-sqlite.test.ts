// SQLite writes one group at a time by default (groupCommit.maxGroups 1). Many concurrent callers on a few sagas,
// messages and timer schedules mixed: every unit applied exactly once, none lost, no "database is locked".

import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime } from '../../../src/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS, isSqlite } from '../../support/databases.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

type Msg = { readonly key: string; readonly inc?: number; readonly schedule?: string } & (
  | { readonly type: 'Start' }
  | { readonly type: 'Do' }
);

const saga = defineSaga<ScriptedSaga, Msg>({
  name: 'scripted',
  state: ScriptedSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Do: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Do(state, message, ctx) {
      if (message.inc) state.counter += message.inc;
      if (message.schedule) ctx.schedule(message.schedule, 60_000, { type: 'Do', key: message.key });
    },
  },
});

for (const dialect of DIALECTS.filter(isSqlite)) {
  describe(`one group at a time on ${dialect}`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });

    it('200 concurrent callers on 5 sagas (messages, timer schedules, starts): only CONCURRENCY_CONFLICT failures, every handled unit applied once', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      expect(runtime.options.groupCommit).toMatchObject({ maxGroups: 1 });
      const keys = Array.from({ length: 5 }, (_, i) => uniqueKey(`b13-sqlite-${i}`));
      const fresh = Array.from({ length: 20 }, (_, i) => uniqueKey(`b13-sqlite-new-${i}`));
      for (const key of keys) await runtime.handle(saga, { type: 'Start', key });
      const calls = [
        ...Array.from({ length: 200 }, (_, i) =>
          runtime.handle(saga, { type: 'Do', key: keys[i % keys.length]!, inc: 1, ...(i % 7 === 0 ? { schedule: `t${i}` } : {}) }),
        ),
        ...fresh.map((key) => runtime.handle(saga, { type: 'Start', key })),
      ];
      const settled = await Promise.allSettled(calls);
      // Under this much contention on one row some units may run out of attempts: CONCURRENCY_CONFLICT, nothing
      // written (documented). No other failure ("database is locked", persistence), and every unit that reports
      // success is applied exactly once.
      const failed = settled.filter((s) => s.status === 'rejected').map((s) => (s as PromiseRejectedResult).reason as { code?: string });
      expect(failed.filter((e) => e.code !== 'CONCURRENCY_CONFLICT').map(String)).toEqual([]);
      const handled = (i: number) => settled[i]!.status === 'fulfilled';
      for (const [k, key] of keys.entries()) {
        const applied = Array.from({ length: 200 }, (_, i) => i).filter((i) => i % keys.length === k && handled(i)).length;
        expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: applied, version: applied });
      }
      const scheduled = Array.from({ length: 200 }, (_, i) => i).filter((i) => i % 7 === 0 && handled(i)).length;
      expect((await rowsOf(db().orm).pendingTimers()).length).toBe(scheduled);
      for (const key of fresh) expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
    });
  });
}
