// A saga whose state is a child of MikroORM 7's table-per-type inheritance (`inheritance: 'tpt'`): its row is
// spread over the parent's table (the SagaState columns, here) and its own. The write phase's own UPDATE
// (plainRowUpdate) sent every changed column to the child's table ("column version does not exist"); MikroORM's
// flush, which splits the change set by table, must write it. The runtime's schema check refuses such a saga
// table, so the test runs with `verifySchema: false`, as a user with that layout does.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { ORM_MAJOR } from '../../../src/orm/orm-major.js';
import { DIALECTS } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

class TptBaseSaga extends SagaState {
  key!: string;
  count: number = 0;
}
class TptChildSaga extends TptBaseSaga {
  extra: string = '';
}
// `inheritance: 'tpt'` exists on MikroORM 7 only: the schemas are built as `never` so 6's types accept them.
const TptBaseSagaSchema = defineEntity({
  class: TptBaseSaga,
  extends: SagaStateSchema,
  tableName: 'tpt_base_saga',
  inheritance: 'tpt',
  properties: { key: { type: 'string', fieldName: 'key', unique: true }, count: { type: 'integer', fieldName: 'count' } },
} as never);
const TptChildSagaSchema = defineEntity({
  class: TptChildSaga,
  extends: TptBaseSagaSchema as never,
  tableName: 'tpt_child_saga',
  properties: { extra: { type: 'string', fieldName: 'extra' } },
} as never);

type TptMessage = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Inc'; readonly key: string };
const tptSaga = defineSaga<TptChildSaga, TptMessage>({
  name: 'tpt',
  state: TptChildSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Inc: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Inc(saga) {
      saga.count++;
      saga.extra = `extra ${saga.count}`;
    },
  },
});

for (const dialect of DIALECTS) {
  describe.skipIf(ORM_MAJOR !== 7)(`a table-per-type saga row is written by MikroORM's flush (${dialect})`, () => {
    const db = useDatabase(dialect, [TptBaseSagaSchema as never, TptChildSagaSchema as never]);

    it('updates the columns of both tables', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [tptSaga], verifySchema: false });
      const key = uniqueKey('tpt');
      await runtime.handle(tptSaga, { type: 'Start', key });
      expect(await runtime.handle(tptSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await runtime.handle(tptSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 2 });
      const read = await db().orm.em.fork().findOneOrFail(TptChildSaga, { key });
      expect([read.count, read.extra, read.version]).toEqual([2, 'extra 2', 2]);
    });
  });
}
