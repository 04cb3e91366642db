import { randomUUID } from 'node:crypto';
import { DateTimeType, EntitySchema } from '@mikro-orm/core';
import { indexExpression } from '../orm/index.js';

/**
 * Base class of every saga state entity. Extend it with the saga's own typed columns and map the subclass
 * the way the app maps its entities: MikroORM 6's decorators, 7's legacy or ES decorators
 * (`@mikro-orm/decorators`), or `defineEntity({ class, extends: SagaStateSchema, ... })` on either major;
 * each saga type gets its own table.
 *
 * The runtime owns these columns: never assign them in a step.
 * - `id`: uuid primary key, generated on creation.
 * - `createdAt` / `updatedAt`: set from the runtime's injected clock.
 * - `completedAt`: null while the saga is active. Completion is soft: the row stays so late messages
 *   can still be recognised (and ignored, unless the definition opts in).
 * - `version`: 0 on insert, +1 on every unit of work that changes the row; every UPDATE is guarded by
 *   `WHERE version = <version read>`, so a concurrent writer makes the loser retry on fresh state.
 *
 * Every saga table also gets a partial index over active rows (`WHERE completed_at IS NULL`).
 */
export abstract class SagaState {
  id: string = randomUUID();
  createdAt!: Date;
  updatedAt!: Date;
  completedAt: Date | null = null;
  // Not MikroORM's `version: true` (which starts at 1): a concurrency-checked integer the runtime bumps
  // itself, so a new row is version 0 and an unchanged row keeps its version.
  version: number = 0;
}

/**
 * SagaState's mapping, as an EntitySchema from `@mikro-orm/core` rather than decorators: it works unchanged on
 * MikroORM 6 and 7 and under every metadata provider, and it keeps the partial index below.
 * Its SQL depends on the saga table, so it is a function; MikroORM's metadata cache (on by default with
 * ts-morph) stores decorated metadata as JSON, which drops an unnamed function expression, and the next
 * run would see a plain `(completed_at)` index. An EntitySchema has no source path, so MikroORM never
 * caches it: the function survives. Registered with MikroORM through `SAGA_ENTITIES`, or found
 * automatically as the parent of a saga entity (MikroORM resolves the class to this schema).
 */
export const SagaStateSchema = new EntitySchema<SagaState>({
  class: SagaState as never,
  abstract: true,
  properties: {
    id: { type: 'uuid', fieldName: 'id', primary: true },
    createdAt: { type: DateTimeType, fieldName: 'created_at' },
    updatedAt: { type: DateTimeType, fieldName: 'updated_at' },
    completedAt: { type: DateTimeType, fieldName: 'completed_at', nullable: true },
    version: { type: 'integer', fieldName: 'version', concurrencyCheck: true },
  },
  indexes: [
    {
      properties: ['completedAt'],
      // Partial index over active sagas only. MikroORM compares expression indexes by name, so a changed
      // definition must come with a new index name.
      // The callback's argument order differs between MikroORM 6 and 7; indexExpression accepts both.
      expression: indexExpression<'createdAt' | 'completedAt'>(
        (table, columns, indexName) =>
          `create index "${indexName}" on "${table.name}" ("${columns.createdAt}") where "${columns.completedAt}" is null`,
      ),
    },
  ],
});
