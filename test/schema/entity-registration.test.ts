// The library's entities must be registered: SAGA_ENTITIES listed in `entities` but not in `entitiesTs` (folder-based
// discovery run through ts-node or tsx) would leave saga_timer and saga_outbox out silently until the first write
// failed. The runtime refuses to start and names the config keys.
import { MikroORM, type Options } from '@mikro-orm/core';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { SAGA_ENTITIES, SagaDefinitionError, SagaOutbox, SagaRuntime, SagaState } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { connectionOptions, DIALECTS } from '../support/databases.js';

for (const dialect of DIALECTS) {
  describe(`library entities must be registered (${dialect})`, () => {
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close(true);
    });

    // Discovery only: the check reads MikroORM's metadata, so no database is needed.
    async function ormWith(overrides: Partial<Options>): Promise<MikroORM> {
      const location = dialect === 'postgresql' ? inject('postgresUrl') : ':memory:';
      const orm = await MikroORM.init({ ...connectionOptions(dialect, location, [ScriptedSaga]), connect: false, ...overrides } as Options);
      opened.push(orm);
      return orm;
    }

    const startRuntime = (orm: MikroORM) => () => new SagaRuntime({ em: orm.em, sagas: [scriptedSaga] });

    it('SAGA_ENTITIES in `entities` but not in `entitiesTs` is refused at construction, naming both keys', async () => {
      const orm = await ormWith({ entities: [...SAGA_ENTITIES, ScriptedSaga], entitiesTs: [ScriptedSaga], preferTs: true });
      let error: unknown;
      try {
        startRuntime(orm)();
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(SagaDefinitionError);
      // Every library entity but SagaState, which the registered saga entity extends.
      const missing = SAGA_ENTITIES.filter((schema) => schema.meta.class !== SagaState).map((schema) => schema.meta.className);
      expect(missing).toEqual(expect.arrayContaining(['SagaTimer', 'SagaOutbox']));
      expect(error).toMatchObject({ code: 'DEFINITION_INVALID', details: { missing } });
      expect((error as Error).message).toContain("'entities'");
      expect((error as Error).message).toContain("'entitiesTs'");
      expect((error as Error).message).toContain('SagaTimer, SagaOutbox');
    });

    it('names exactly the entities that are missing; an abstract base counts through its subclasses', async () => {
      const withoutOutbox = SAGA_ENTITIES.filter((schema) => schema.meta.class !== SagaOutbox);
      const orm = await ormWith({ entities: [...withoutOutbox, ScriptedSaga] });
      expect(startRuntime(orm)).toThrow(expect.objectContaining({ code: 'DEFINITION_INVALID', details: { missing: ['SagaOutbox'] } }));
    });

    it('starts when every library entity is registered, in `entitiesTs` as well', async () => {
      const orm = await ormWith({
        entities: [...SAGA_ENTITIES, ScriptedSaga],
        entitiesTs: [...SAGA_ENTITIES, ScriptedSaga],
        preferTs: true,
      });
      expect(startRuntime(orm)().definition('scripted')).toBeDefined();
    });
  });
}
