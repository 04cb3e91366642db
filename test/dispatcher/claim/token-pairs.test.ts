// The token-checked multi-row statements (lease renewal, start marks, published stamps) must match each claim's
// id with that claim's own token: a row is written only under (its id, its token), never under its id and the
// token another claim of the same statement carries (src/sql/claimed-row-updates.ts updateClaimedRows).
import { describe, expect, it } from 'vitest';
import { claimDueTimers } from '../../../src/dispatcher/claim-due-rows.js';
import { SagaRuntime, SagaTimer } from '../../../src/index.js';
import { markDeliveriesStarted, renewLeases } from '../../../src/sql/delivery-statements.js';
import { DISPATCH_TABLES } from '../../../src/sql/dispatch-tables.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`token-checked statements pair ids with their own tokens (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('claims whose tokens are swapped between two rows renew and start neither row; their own pairs do', async () => {
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      for (const key of [uniqueKey('pair-a'), uniqueKey('pair-b')]) {
        await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'schedule', name: 'due', after: 0 }] });
      }
      const lease = new Date(clock.now().getTime() + 30_000);
      const [a, b] = (await claimDueTimers(runtime.context, clock.now(), lease, 10)).rows;
      const swapped = [
        { id: a!.id, token: b!.token },
        { id: b!.id, token: a!.token },
      ];
      const leaseOf = async () =>
        (
          await db()
            .orm.em.fork({ clear: true })
            .find(SagaTimer, { id: { $in: [a!.id, b!.id] } })
        ).map((t) => [t.id, t.lockedUntil?.toISOString(), t.deliveryStartedAt?.toISOString() ?? null]);
      const before = await leaseOf();

      expect((await renewLeases(runtime.context, DISPATCH_TABLES.timer, swapped, new Date(lease.getTime() + 60_000))).written).toEqual([]);
      expect((await markDeliveriesStarted(runtime.context, DISPATCH_TABLES.timer, swapped, clock.now())).written).toEqual([]);
      expect(await leaseOf(), 'neither row was written under the other row’s token').toEqual(before);

      const own = [a!, b!].map(({ id, token }) => ({ id, token }));
      expect([...(await markDeliveriesStarted(runtime.context, DISPATCH_TABLES.timer, own, clock.now())).written].sort()).toEqual(
        [a!.id, b!.id].sort(),
      );
    });
  });
}
