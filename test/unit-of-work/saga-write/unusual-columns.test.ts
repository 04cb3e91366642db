// The write phase's own UPDATE writes columns whose names need quoting (spaces, embedded double quotes), values
// holding ?, ?? and \\?, a nullable column set to null and back, an enum, a string[] array and a lazy property, as
// MikroORM reads them back, on every driver and both majors.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { DIALECTS } from '../../support/databases.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

class OddSaga extends SagaState {
  key!: string;
  count: number = 0;
  odd: string | null = 'x';
  tags: string[] = [];
  level: 'low' | 'high' = 'low';
  lazyNote: string | null = null;
}
const OddSagaSchema = defineEntity({
  class: OddSaga,
  extends: SagaStateSchema,
  tableName: 'odd_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'Count "Of" Things' },
    odd: { type: 'text', fieldName: 'odd col', nullable: true },
    tags: { type: 'string[]', fieldName: 'tags' },
    level: { enum: true, items: ['low', 'high'], fieldName: 'level' } as never,
    lazyNote: { type: 'text', fieldName: 'lazy_note', nullable: true, lazy: true },
  },
});
type M = { type: 'Start'; key: string } | { type: 'Go'; key: string };
const odd = defineSaga<OddSaga, M>({
  name: 'odd',
  state: OddSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Go: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Go(s) {
      s.count++;
      s.odd = s.count === 1 ? null : "it's? ?? \\?";
      s.tags = [...s.tags, `t"${s.count}{x}`];
      s.level = 'high';
      s.lazyNote = 'n';
    },
  },
});
for (const dialect of DIALECTS) {
  describe(`the direct UPDATE of unusual columns (${dialect})`, () => {
    const db = useDatabase(dialect, [OddSagaSchema]);
    it('writes quoted names, placeholder-like values, null, enum, array and lazy columns', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [odd] });
      const key = uniqueKey('o');
      await runtime.handle(odd, { type: 'Start', key });
      await runtime.handle(odd, { type: 'Go', key });
      await runtime.handle(odd, { type: 'Go', key });
      const r = await db()
        .orm.em.fork()
        .findOneOrFail(OddSaga, { key }, { populate: ['lazyNote'] as never });
      expect({ ...r }).toMatchObject({
        count: 2,
        odd: "it's? ?? \\?",
        tags: ['t"1{x}', 't"2{x}'],
        level: 'high',
        lazyNote: 'n',
        version: 2,
      });
    });
  });
}
