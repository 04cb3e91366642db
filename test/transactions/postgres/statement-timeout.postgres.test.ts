// docs/guarantees.md ("A row held by another transaction"): a connection `statement_timeout` shorter than the group's
// lock timeout ends a unit's wait for a held row first; the statement fails as canceled (57014), nothing is written,
// and the unit fails with PERSISTENCE_FAILED. On MikroORM 6 that unit's UPDATE carries BEGIN and COMMIT in one round
// trip: a canceled statement there is still a refusal (COMMIT never ran), never COMMIT_OUTCOME_UNKNOWN.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../../src/index.js';
import { pgConnectionOptions } from '../../../src/orm/connection-info.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { rowLocker } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

describe('statement_timeout on a held saga row (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  const releases: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const release of releases.splice(0)) await release().catch(() => undefined);
    for (const orm of opened.splice(0)) await orm.close();
  });

  for (const groupCommit of [undefined, false] as const) {
    it(`ends the unit with PERSISTENCE_FAILED, nothing written (groupCommit ${String(groupCommit)})`, async () => {
      const key = uniqueKey('timeout');
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      await plain.handle(scriptedSaga, { type: 'Start', key });
      const lockOrm = await db().openAnother();
      opened.push(lockOrm);
      const { lock, release } = await rowLocker(lockOrm, 'scripted_saga');
      releases.push(release);
      await lock('key', key);
      // The application's own statement_timeout (40 ms) is shorter than the group's lock timeout (250 ms by default).
      const orm = await db().openAnother({ driverOptions: pgConnectionOptions({ serverOptions: '-c statement_timeout=40' }) });
      opened.push(orm);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], ...(groupCommit === false ? { groupCommit } : {}) });
      const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'PERSISTENCE_FAILED' });
      expect((error as Error).message).toMatch(/nothing of it was written/);
      await release();
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
      // The connection is in working order: the next message commits.
      expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })).toMatchObject({ version: 1 });
    });
  }
});
