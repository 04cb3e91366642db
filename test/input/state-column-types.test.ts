// The state check (src/saga/state-values.ts) skips a property whose customType is not one of MikroORM's `types`.
// A built-in column declared another way (a type instance, a type name such as 'text', a columnType only) must
// still be checked: a U+0000 string is refused with STATE_VALUE_INVALID before anything is written.
import { defineEntity, StringType, TextType, types } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../src/index.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

class StyledSaga extends SagaState {
  key!: string;
  a?: string;
  b?: string;
  c?: string;
  d?: string;
  e?: string;
  f?: string;
  g?: string;
}

const StyledSagaSchema = defineEntity({
  class: StyledSaga,
  extends: SagaStateSchema,
  tableName: 'styled_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    a: { type: 'string', nullable: true },
    b: { type: 'text', nullable: true },
    c: { type: types.string, nullable: true },
    d: { type: new StringType(), nullable: true } as never,
    e: { type: TextType, nullable: true },
    f: { type: types.text, nullable: true },
    g: { type: 'string', columnType: 'varchar(20)', nullable: true },
  },
});

const PROPS = ['a', 'b', 'c', 'd', 'e', 'f', 'g'] as const;
type Msg = { readonly type: 'Start'; readonly key: string; readonly prop: (typeof PROPS)[number]; readonly text: string };

const styledSaga = defineSaga<StyledSaga, Msg>({
  name: 'styled',
  state: StyledSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(saga, message) {
      saga[message.prop] = message.text;
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`a built-in string column however declared is checked (${dialect})`, () => {
    const db = useDatabase(dialect, [StyledSagaSchema]);
    for (const prop of PROPS) {
      it(`refuses U+0000 in ${prop} with STATE_VALUE_INVALID`, async () => {
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [styledSaga] });
        const key = uniqueKey('styled');
        await expect(runtime.handle(styledSaga, { type: 'Start', key, prop, text: 'a\u0000b' })).rejects.toMatchObject({
          code: 'STATE_VALUE_INVALID',
        });
        const rows = await db().orm.em.fork().getConnection().execute('select count(*) as n from styled_saga where key = ?', [key]);
        expect(Number(rows[0].n)).toBe(0);
      });
    }
  });
}
