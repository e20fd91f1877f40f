const config = JSON.parse("{not json");
export default async () => config;
