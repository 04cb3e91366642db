import type { EntityManager } from '@mikro-orm/core';
import type { SagaOperations } from '../operations/saga-operations.js';
import type { AnySagaDefinition } from '../saga/registered-saga.js';
import { CliUsageError } from './cli-usage-error.js';

/** An option of a command, as `node:util` parseArgs takes it, with its help text. */
export interface CliOption {
  readonly type: 'string' | 'boolean';
  readonly multiple?: boolean;
  /** Help text; says the default. */
  readonly help: string;
  /** Placeholder of the value in help (`<date>`). */
  readonly value?: string;
}

/** What a command reads from its command line. */
export interface CliInput {
  readonly values: Readonly<Record<string, string | boolean | string[] | undefined>>;
  readonly positionals: readonly string[];
  /** "Now", for relative times (`--dispatched-before 7d`). */
  readonly now: Date;
}

/** What a command runs against. */
export interface CliContext {
  readonly ops: SagaOperations;
  readonly em: EntityManager;
  readonly sagas: readonly AnySagaDefinition[];
}

/** What a command prints: `text` for people, `data` as JSON with `--json`. */
export interface CliOutput {
  readonly text: string;
  readonly data: unknown;
  /** Default 0. */
  readonly exitCode?: number;
}

/** One command of the CLI. */
export interface CliCommand {
  /** The words that select it: `sagas list`, `purge`. */
  readonly name: string;
  /** Positional arguments, for help (`<type> <id>`). */
  readonly args?: string;
  readonly summary: string;
  /** More help: what it prints and when it exits non-zero. */
  readonly details?: string;
  readonly options: Readonly<Record<string, CliOption>>;
  /** Checks the command line before anything is asked or opened; throws {@link CliUsageError}. */
  readonly validate?: (input: CliInput) => void;
  /** For a command that writes: the question to confirm (answered by `--yes`). */
  readonly confirm?: (input: CliInput) => string;
  run(context: CliContext, input: CliInput): Promise<CliOutput>;
}

/** The string value of `--name`, or undefined. */
export function text(input: CliInput, name: string): string | undefined {
  const value = input.values[name];
  return typeof value === 'string' ? value : undefined;
}

/** An integer option: its value, `fallback` when absent; not an integer is a usage error. */
export function integer(input: CliInput, name: string, fallback?: number): number | undefined {
  const value = text(input, name);
  if (value === undefined) return fallback;
  if (!/^-?\d+$/.test(value)) throw new CliUsageError(`--${name} takes an integer.`);
  return Number(value);
}

const RELATIVE = /^(\d+)(ms|s|m|h|d)$/;
const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** An ISO 8601 date-time option (`2026-11-30T09:00:00Z`); anything else is a usage error. */
export function isoInstant(input: CliInput, name: string): Date | undefined {
  const value = text(input, name);
  if (value === undefined) return undefined;
  const date = /^\d{4}-\d{2}-\d{2}/.test(value) ? new Date(value) : new Date(Number.NaN);
  if (Number.isNaN(date.getTime())) throw new CliUsageError(`--${name} takes an ISO 8601 date-time such as 2026-11-30T09:00:00Z.`);
  return date;
}

/** An instant option: an ISO 8601 date-time, or an age before now (`90m`, `12h`, `7d`). */
export function instant(input: CliInput, name: string): Date | undefined {
  const relative = RELATIVE.exec(text(input, name) ?? '');
  if (!relative) return isoInstant(input, name);
  return shifted(input, name, -Number(relative[1]) * UNIT_MS[relative[2]!]!);
}

const AHEAD = /^(?:\+|in\s+)(\d+)(ms|s|m|h|d)$/;

/**
 * A time that may lie ahead (`--due`): an ISO 8601 date-time, `now`, or a time from now (`+2h` or `in 2h`). A
 * bare age (`2h`) is refused rather than read as 2 hours ago.
 */
export function dueInstant(input: CliInput, name: string): Date | undefined {
  const value = text(input, name)?.trim();
  if (value === undefined) return undefined;
  if (value === 'now') return input.now;
  const ahead = AHEAD.exec(value);
  if (ahead) return shifted(input, name, Number(ahead[1]) * UNIT_MS[ahead[2]!]!);
  const example = RELATIVE.test(value) ? `+${value}` : '+2h';
  if (!/^\d{4}-\d{2}-\d{2}/.test(value) || Number.isNaN(new Date(value).getTime())) {
    throw new CliUsageError(
      `--${name} takes an ISO 8601 date-time (2026-11-30T09:00:00Z), now, or a time from now: ${example} or "in ${example.slice(1)}".`,
    );
  }
  return new Date(value);
}

/** `now` moved by `ms`; a date out of range is a usage error. */
function shifted(input: CliInput, name: string, ms: number): Date {
  const date = new Date(input.now.getTime() + ms);
  if (Number.isNaN(date.getTime())) throw new CliUsageError(`--${name} is too far from now for a date.`);
  return date;
}

/** The positional arguments `names`, all required. */
export function positionals(input: CliInput, ...names: string[]): string[] {
  if (input.positionals.length !== names.length) {
    throw new CliUsageError(`Expected ${names.map((n) => `<${n}>`).join(' ')}; got ${input.positionals.length} argument(s).`);
  }
  return [...input.positionals];
}

/** At least one id as positional arguments. */
export function ids(input: CliInput): string[] {
  if (input.positionals.length === 0) throw new CliUsageError('Give at least one id.');
  return [...input.positionals];
}

/** Shared options of listings. */
export const PAGE_OPTIONS: Readonly<Record<string, CliOption>> = {
  limit: { type: 'string', value: '<n>', help: 'Most rows on the page, 1 to 1000. Default 20.' },
  cursor: { type: 'string', value: '<cursor>', help: 'The next page: the cursor the previous page printed (same filters).' },
};

/** Default page size of the listings. */
export const DEFAULT_CLI_LIMIT = 20;

/** A page's table, followed by how to read the next page when there is one. */
export function withNextPage(table: string, nextCursor: string | null): string {
  return nextCursor === null ? table : `${table}\nmore: --cursor ${nextCursor}`;
}
