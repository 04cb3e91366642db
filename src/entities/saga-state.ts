import { randomUUID } from 'node:crypto';
import { DateTimeType, Entity, Index, PrimaryKey, Property } from '@mikro-orm/core';

/**
 * Base class of every saga state entity. Extend it with the saga's own typed columns and decorate the
 * subclass with `@Entity()`; each saga type gets its own table.
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
@Entity({ abstract: true })
@Index({
  properties: ['completedAt'],
  // Partial index over active sagas only. MikroORM compares expression indexes by name, so a changed
  // definition must come with a new index name.
  expression: (table, columns, indexName) =>
    `create index "${indexName}" on "${table.name}" ("${columns.createdAt}") where "${columns.completedAt}" is null`,
})
export abstract class SagaState {
  @PrimaryKey({ type: 'uuid', fieldName: 'id' })
  id: string = randomUUID();

  @Property({ type: DateTimeType, fieldName: 'created_at' })
  createdAt!: Date;

  @Property({ type: DateTimeType, fieldName: 'updated_at' })
  updatedAt!: Date;

  @Property({ type: DateTimeType, fieldName: 'completed_at', nullable: true })
  completedAt: Date | null = null;

  // Not MikroORM's `version: true` (which starts at 1): a concurrency-checked integer the runtime bumps
  // itself, so a new row is version 0 and an unchanged row keeps its version.
  @Property({ type: 'integer', fieldName: 'version', concurrencyCheck: true })
  version: number = 0;
}
