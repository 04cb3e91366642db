// The lock bound of a group of one is a WITH query ("saga_lock_bound") joined to the saga row's UPDATE. The saga
// table and its columns are the application's: a table named like the WITH query, or an id column named like one
// of its columns (`own`, `set_config`), must write as any other (the update path and the version guard).
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

class BoundNamedSaga extends SagaState {
  key!: string;
  count: number = 0;
}
const BoundNamedSagaSchema = defineEntity({
  class: BoundNamedSaga,
  extends: SagaStateSchema,
  tableName: 'saga_lock_bound',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'own' },
  },
});

class OwnIdSaga extends SagaState {
  key!: string;
  count: number = 0;
}
const OwnIdSagaSchema = defineEntity({
  class: OwnIdSaga,
  extends: SagaStateSchema,
  tableName: 'Own_Id_Saga',
  properties: {
    id: { type: 'uuid', fieldName: 'own', primary: true },
    version: { type: 'integer', fieldName: 'set_config', concurrencyCheck: true },
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
  },
});

type M = { type: 'Start'; key: string } | { type: 'Go'; key: string } | { type: 'Send'; key: string };
/** Both state classes have the same properties. */
function sagaOf(name: string, state: new () => BoundNamedSaga) {
  return defineSaga<BoundNamedSaga, M>({
    name,
    state,
    correlation: { property: 'key', from: { Start: (m) => m.key, Go: (m) => m.key, Send: (m) => m.key } },
    startedBy: ['Start'],
    steps: {
      Start() {},
      Go(s) {
        s.count++;
      },
      // Changes no column: the version guard, with the outbox row after it.
      Send(_s, _m, ctx) {
        ctx.send({ type: 'Sent' });
      },
    },
  });
}

describe('the lock bound WITH query and the names of a saga table (postgresql)', () => {
  const db = useDatabase('postgresql', [BoundNamedSagaSchema, OwnIdSagaSchema]);

  for (const [name, state] of [
    ['table saga_lock_bound', BoundNamedSaga],
    ['id column own, version column set_config', OwnIdSaga],
  ] as const) {
    it(`updates and guards the saga row: ${name}`, async () => {
      const saga = sagaOf(name.replace(/\W/g, '_'), state as new () => BoundNamedSaga);
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga] });
      const key = uniqueKey('bound');
      await runtime.handle(saga, { type: 'Start', key });
      expect(await runtime.handle(saga, { type: 'Go', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await runtime.handle(saga, { type: 'Send', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await runtime.handle(saga, { type: 'Go', key })).toMatchObject({ outcome: 'handled', version: 2 });
      const row = await db()
        .orm.em.fork()
        .findOneOrFail(state as new () => BoundNamedSaga, { key });
      expect({ count: row.count, version: row.version }).toEqual({ count: 2, version: 2 });
    });
  }
});
