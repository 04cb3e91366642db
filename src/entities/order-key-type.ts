import { BigIntType, type EntityProperty, type Platform } from '@mikro-orm/core';

/**
 * The type of `saga_inbox.order_key`: a 64-bit integer the database assigns on insert, in the order rows are written.
 * PostgreSQL declares it `bigserial` (a sequence), as MikroORM's `bigint` does. A database whose auto-assigned integer
 * key is declared plain `integer` (SQLite: the rowid, already 64 bits; `autoincrement` is allowed on an `integer
 * primary key` only) gets `integer`: MikroORM's `bigint` would declare `bigint` there, which its own schema reader
 * sees as `integer`, so every schema diff would rebuild the table.
 */
export class OrderKeyType extends BigIntType {
  override getColumnType(prop: EntityProperty, platform: Platform): string {
    const autoInteger = platform.getIntegerTypeDeclarationSQL({ ...prop, autoincrement: true, primary: true } as EntityProperty);
    return autoInteger === 'integer' ? autoInteger : super.getColumnType(prop, platform);
  }
}
