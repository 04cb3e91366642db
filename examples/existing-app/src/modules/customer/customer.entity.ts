import { Entity, PrimaryKey, Property } from '@mikro-orm/core';

/** The app's own entity, found by folder-based discovery; it has nothing to do with sagas. */
@Entity({ tableName: 'customer' })
export class Customer {
  @PrimaryKey({ type: 'string', length: 64 })
  id!: string;

  @Property({ type: 'string', length: 200 })
  name!: string;
}
