// Checks a JSON value against the subset of JSON Schema the bench result files
// use (type, required, properties, additionalProperties, minimum). The Python
// peer script implements the same subset, so one schema file binds both.

export type JsonType = 'object' | 'array' | 'string' | 'number' | 'integer' | 'boolean' | 'null';

export interface JsonSchema {
  type?: JsonType | JsonType[];
  required?: string[];
  properties?: Record<string, JsonSchema>;
  additionalProperties?: boolean;
  minimum?: number;
}

/** The offline result schema, relative to the package root. */
export const OFFLINE_RESULT_SCHEMA_PATH = 'bench/offline-result.schema.json';

function typeOf(value: unknown): JsonType {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value as JsonType;
}

function typeMatches(actual: JsonType, expected: JsonType): boolean {
  return actual === expected || (expected === 'number' && actual === 'integer');
}

/** Every violation, as `path: message`; empty when the value conforms. */
export function schemaErrors(value: unknown, schema: JsonSchema, path = '$'): string[] {
  const errors: string[] = [];
  const actual = typeOf(value);
  if (typeof value === 'number' && !Number.isFinite(value)) return [`${path}: ${value} is not a JSON number`];
  if (schema.type !== undefined) {
    const expected = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!expected.some((t) => typeMatches(actual, t))) return [`${path}: expected ${expected.join(' or ')}, got ${actual}`];
  }
  if (schema.minimum !== undefined && typeof value === 'number' && value < schema.minimum) {
    errors.push(`${path}: ${value} is below the minimum ${schema.minimum}`);
  }
  if (actual === 'object') {
    const obj = value as Record<string, unknown>;
    for (const key of schema.required ?? []) {
      if (!(key in obj)) errors.push(`${path}: missing required key "${key}"`);
    }
    for (const [key, v] of Object.entries(obj)) {
      const sub = schema.properties?.[key];
      if (sub) errors.push(...schemaErrors(v, sub, `${path}.${key}`));
      else if (schema.additionalProperties === false) errors.push(`${path}: unexpected key "${key}"`);
    }
  }
  return errors;
}
